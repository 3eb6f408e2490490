package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// files is what a Reader reads a tree through: the host's file system
// (osFiles: paths under the root, as the os package takes them) or an
// fs.FS (fsFiles: slash paths under "."). The reading code is the same for
// both; only these calls differ.
type files interface {
	ReadDir(name string) ([]fs.DirEntry, error)
	Stat(name string) (fs.FileInfo, error)
	Readlink(name string) (string, error)
	EvalSymlinks(name string) (string, error)
	Glob(pattern string) ([]string, error)
	// OpenAttr opens an attribute without blocking on it: a FIFO in a
	// fake or hostile tree must not hang discovery.
	OpenAttr(name string) (fs.File, error)
}

// tree reads through one files; the readers of this package are its
// methods.
type tree struct{ f files }

type osFiles struct{}

func (osFiles) ReadDir(name string) ([]fs.DirEntry, error) { return os.ReadDir(name) }
func (osFiles) Stat(name string) (fs.FileInfo, error)      { return os.Stat(name) }
func (osFiles) Readlink(name string) (string, error)       { return os.Readlink(name) }
func (osFiles) EvalSymlinks(name string) (string, error)   { return filepath.EvalSymlinks(name) }
func (osFiles) Glob(pattern string) ([]string, error)      { return filepath.Glob(pattern) }
func (osFiles) OpenAttr(name string) (fs.File, error) {
	return os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

// fsFiles reads an fs.FS that implements fs.ReadLinkFS. Open follows
// links (the fs.FS contract); EvalSymlinks resolves them itself, and
// refuses any that leaves the tree.
type fsFiles struct{ fsys fs.FS }

func (f fsFiles) ReadDir(name string) ([]fs.DirEntry, error) { return fs.ReadDir(f.fsys, name) }
func (f fsFiles) Stat(name string) (fs.FileInfo, error)      { return fs.Stat(f.fsys, name) }
func (f fsFiles) Readlink(name string) (string, error)       { return fs.ReadLink(f.fsys, name) }
func (f fsFiles) Glob(pattern string) ([]string, error)      { return fs.Glob(f.fsys, pattern) }
func (f fsFiles) OpenAttr(name string) (fs.File, error)      { return f.fsys.Open(name) }

// maxLinkHops bounds the links one path may go through, as the kernel's
// own limit does (40): a loop of links is an error, not a hang.
const maxLinkHops = 40

// errOutside is a link that leads out of the tree.
var errOutside = errors.New("leads outside the tree")

// EvalSymlinks is filepath.EvalSymlinks inside the fs.FS: every link on
// the way is followed, relative to its own directory; an absolute link,
// or one that climbs above the root, is refused.
func (f fsFiles) EvalSymlinks(name string) (string, error) {
	todo := strings.Split(path.Clean(name), "/")
	done, hops := ".", 0
	for len(todo) > 0 {
		p := todo[0]
		todo = todo[1:]
		switch p {
		case ".", "":
			continue
		case "..":
			if done == "." {
				return "", fmt.Errorf("resolving %s: %w", name, errOutside)
			}
			done = path.Dir(done)
			continue
		}
		next := path.Join(done, p)
		info, err := fs.Lstat(f.fsys, next)
		if err != nil {
			return "", err
		}
		if info.Mode()&fs.ModeSymlink == 0 {
			done = next
			continue
		}
		if hops++; hops > maxLinkHops {
			return "", fmt.Errorf("resolving %s: more than %d links", name, maxLinkHops)
		}
		target, err := fs.ReadLink(f.fsys, next)
		if err != nil {
			return "", err
		}
		if path.IsAbs(target) {
			return "", fmt.Errorf("resolving %s: %s -> %s %w", name, next, target, errOutside)
		}
		todo = append(strings.Split(target, "/"), todo...)
	}
	return done, nil
}
