package machines

import (
	"errors"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"
)

// memFS is a file tree in memory: directories, files and symbolic links,
// what a sysfs shape is made of. It is an fs.FS whose Open follows links
// (fs.ReadLinkFS's Lstat and ReadLink do not), with the writes a Tree
// makes, so that Load reads a catalogue machine through the real sysfs
// reader without writing to disk. Paths are slash paths under ".".
type memFS struct{ root *memNode }

type memNode struct {
	name string
	mode fs.FileMode
	data []byte // a file's content, a link's target
	kids map[string]*memNode
}

func newMemFS() *memFS {
	return &memFS{root: &memNode{name: ".", mode: fs.ModeDir | 0o755, kids: map[string]*memNode{}}}
}

// maxHops bounds the links one lookup follows (the kernel's limit).
const maxHops = 40

var errLoop = errors.New("too many links")

// lookup finds name, following links on the way and, when follow is set,
// the last one too.
func (m *memFS) lookup(name string, follow bool) (*memNode, string, error) {
	if !fs.ValidPath(name) {
		return nil, "", fs.ErrInvalid
	}
	todo := strings.Split(name, "/")
	cur, at, hops := m.root, ".", 0
	for len(todo) > 0 {
		p := todo[0]
		todo = todo[1:]
		if p == "." || p == "" {
			continue
		}
		if p == ".." {
			at = path.Dir(at)
			var err error
			if cur, _, err = m.lookup(at, true); err != nil {
				return nil, "", err
			}
			continue
		}
		next, ok := cur.kids[p]
		if !ok || cur.kids == nil {
			return nil, "", fs.ErrNotExist
		}
		if next.mode&fs.ModeSymlink != 0 && (len(todo) > 0 || follow) {
			if hops++; hops > maxHops {
				return nil, "", errLoop
			}
			target := string(next.data)
			if path.IsAbs(target) {
				return nil, "", fs.ErrNotExist
			}
			todo = append(strings.Split(target, "/"), todo...)
			continue
		}
		cur, at = next, path.Join(at, p)
	}
	return cur, at, nil
}

func (m *memFS) err(op, name string, err error) error {
	return &fs.PathError{Op: op, Path: name, Err: err}
}

// Open follows links.
func (m *memFS) Open(name string) (fs.File, error) {
	n, _, err := m.lookup(name, true)
	if err != nil {
		return nil, m.err("open", name, err)
	}
	return &memFile{n: n, r: strings.NewReader(string(n.data))}, nil
}

// Lstat does not follow a last link.
func (m *memFS) Lstat(name string) (fs.FileInfo, error) {
	n, _, err := m.lookup(name, false)
	if err != nil {
		return nil, m.err("lstat", name, err)
	}
	return memInfo{n}, nil
}

// ReadLink reads a link's target.
func (m *memFS) ReadLink(name string) (string, error) {
	n, _, err := m.lookup(name, false)
	if err != nil {
		return "", m.err("readlink", name, err)
	}
	if n.mode&fs.ModeSymlink == 0 {
		return "", m.err("readlink", name, fs.ErrInvalid)
	}
	return string(n.data), nil
}

// mkdirAll makes name and its parents (following links on the way).
func (m *memFS) mkdirAll(name string) (*memNode, error) {
	if name == "." {
		return m.root, nil
	}
	parent, err := m.mkdirAll(path.Dir(name))
	if err != nil {
		return nil, err
	}
	if parent.mode&fs.ModeSymlink != 0 {
		if parent, _, err = m.lookup(path.Dir(name), true); err != nil {
			return nil, err
		}
	}
	if !parent.mode.IsDir() {
		return nil, m.err("mkdir", name, fs.ErrExist)
	}
	base := path.Base(name)
	if n, ok := parent.kids[base]; ok {
		if n.mode&fs.ModeSymlink != 0 {
			n, _, err = m.lookup(name, true)
		}
		return n, err
	}
	n := &memNode{name: base, mode: fs.ModeDir | 0o755, kids: map[string]*memNode{}}
	parent.kids[base] = n
	return n, nil
}

// put places n at name, replacing what is there; its parents are made.
func (m *memFS) put(name string, n *memNode) error {
	if !fs.ValidPath(name) || name == "." {
		return m.err("write", name, fs.ErrInvalid)
	}
	dir, err := m.mkdirAll(path.Dir(name))
	if err != nil {
		return err
	}
	n.name = path.Base(name)
	dir.kids[n.name] = n
	return nil
}

func (m *memFS) writeFile(name string, data []byte) error {
	if n, _, err := m.lookup(name, true); err == nil && !n.mode.IsDir() {
		n.data = slices.Clone(data) // writing through a link writes its target
		return nil
	}
	return m.put(name, &memNode{mode: 0o644, data: slices.Clone(data)})
}

func (m *memFS) symlink(target, name string) error {
	return m.put(name, &memNode{mode: fs.ModeSymlink | 0o777, data: []byte(target)})
}

// removeAll removes name (not what a link at name points to).
func (m *memFS) removeAll(name string) error {
	dir, _, err := m.lookup(path.Dir(name), true)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	delete(dir.kids, path.Base(name))
	return nil
}

type memInfo struct{ n *memNode }

func (i memInfo) Name() string       { return i.n.name }
func (i memInfo) Size() int64        { return int64(len(i.n.data)) }
func (i memInfo) Mode() fs.FileMode  { return i.n.mode }
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return i.n.mode.IsDir() }
func (i memInfo) Sys() any           { return nil }

// memFile is an open file or directory.
type memFile struct {
	n    *memNode
	r    *strings.Reader
	read int // directory entries returned so far
}

func (f *memFile) Stat() (fs.FileInfo, error) { return memInfo{f.n}, nil }
func (f *memFile) Close() error               { return nil }
func (f *memFile) Read(b []byte) (int, error) {
	if f.n.mode.IsDir() {
		return 0, &fs.PathError{Op: "read", Path: f.n.name, Err: fs.ErrInvalid}
	}
	return f.r.Read(b)
}

// ReadDir lists a directory in name order (fs.ReadDirFile).
func (f *memFile) ReadDir(count int) ([]fs.DirEntry, error) {
	if !f.n.mode.IsDir() {
		return nil, &fs.PathError{Op: "readdir", Path: f.n.name, Err: fs.ErrInvalid}
	}
	names := make([]string, 0, len(f.n.kids))
	for k := range f.n.kids {
		names = append(names, k)
	}
	slices.Sort(names)
	names = names[f.read:]
	if count > 0 && len(names) > count {
		names = names[:count]
	}
	if count > 0 && len(names) == 0 {
		return nil, io.EOF
	}
	f.read += len(names)
	out := make([]fs.DirEntry, len(names))
	for i, k := range names {
		out[i] = fs.FileInfoToDirEntry(memInfo{f.n.kids[k]})
	}
	return out, nil
}
