package nicaffinity

import (
	"strings"
	"sync"
	"sync/atomic"
)

// viewIndex finds a node's published view by name. Filter and Score ask it
// for every node of every cycle from many goroutines, so reading takes no
// lock and touches little memory: a snapshot maps names (packed into one
// string) to positions in one slice of atomic pointers, small enough to
// stay in the CPU's caches at thousands of nodes (a map of names to
// pointers, with names and cells scattered over the heap, cost about 250 ns
// a lookup at 5000 nodes, most of it cache misses). A node's view is
// swapped in its cell; nodes that appear after the snapshot was built go to
// the snapshot's small overflow map until enough of them are folded into a
// new snapshot, so growing to n nodes copies O(n) names, not O(n^2).
type viewIndex struct {
	cur atomic.Pointer[indexSnapshot]
	// recent is the writer's side of cur's overflow (under the store's lock).
	recent map[string]*atomic.Pointer[published]
}

type indexSnapshot struct {
	ids   map[string]int32
	slots []atomic.Pointer[published]
	// overflow holds the cells of nodes added since this snapshot; a reader
	// that still holds an older snapshot keeps seeing that one's overflow.
	overflow *sync.Map
}

// load is the node's published view, or nil.
func (x *viewIndex) load(node string) *published {
	snap := x.cur.Load()
	if snap == nil {
		return nil
	}
	if i, ok := snap.ids[node]; ok {
		return snap.slots[i].Load()
	}
	if cell, ok := snap.overflow.Load(node); ok {
		return cell.(*atomic.Pointer[published]).Load()
	}
	return nil
}

// store publishes a node's view; the caller holds the store's lock.
func (x *viewIndex) store(node string, p *published) {
	snap := x.cur.Load()
	if snap == nil {
		snap = &indexSnapshot{overflow: &sync.Map{}}
		x.cur.Store(snap)
	}
	if i, ok := snap.ids[node]; ok {
		snap.slots[i].Store(p)
		return
	}
	if cell, ok := x.recent[node]; ok {
		cell.Store(p)
		return
	}
	cell := &atomic.Pointer[published]{}
	cell.Store(p)
	if x.recent == nil {
		x.recent = map[string]*atomic.Pointer[published]{}
	}
	x.recent[node] = cell
	snap.overflow.Store(node, cell)
	if len(x.recent) >= max(64, len(snap.ids)/8) {
		x.compact(snap)
	}
}

// compact builds a new snapshot of every node.
func (x *viewIndex) compact(old *indexSnapshot) {
	names := make([]string, 0, len(old.ids)+len(x.recent))
	views := make([]*published, 0, cap(names))
	for name, i := range old.ids {
		names, views = append(names, name), append(views, old.slots[i].Load())
	}
	for name, cell := range x.recent {
		names, views = append(names, name), append(views, cell.Load())
	}
	var b strings.Builder
	for _, n := range names {
		b.WriteString(n)
	}
	packed := b.String()
	snap := &indexSnapshot{ids: make(map[string]int32, len(names)), slots: make([]atomic.Pointer[published], len(names)), overflow: &sync.Map{}}
	off := 0
	for i, n := range names {
		snap.ids[packed[off:off+len(n)]] = int32(i)
		off += len(n)
		snap.slots[i].Store(views[i])
	}
	x.cur.Store(snap)
	x.recent = map[string]*atomic.Pointer[published]{}
}
