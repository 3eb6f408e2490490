package nicaffinity

import (
	"maps"
	"sync"
	"sync/atomic"
)

// cellMap maps each known node to the cell holding its current view.
//
// Filter and Score read a view per node of every cycle, so a read must be
// one map lookup without a lock; and a scheduler that learns of N nodes at
// start, or when it takes the lease over, must pay O(N) for them, not the
// O(N^2) of copying one map per new node (0.34 s at 5,000 nodes and 5.6 s
// at 20,000 on the 2-core machine: BenchmarkColdStart). So:
//   - base is an immutable map, replaced whole; a read of a node in it
//     loads one pointer and looks it up;
//   - a new node goes into recent, a small map behind a lock, and recent
//     is merged into a new base once it holds an eighth of base: a merge
//     costs O(N) once per N/8 new nodes, O(1) a node amortized. Below
//     smallBase nodes every new node is merged at once, as copying so few
//     costs little, so small clusters (and the benchmarks' one-node
//     caches) always read base alone;
//   - reads that miss base look in recent only while it is not empty (one
//     atomic load otherwise), and count those that find their node there:
//     once as many as recent holds nodes have, recent is merged, so a
//     scheduler that has stopped learning nodes soon reads base alone
//     again. (A node not known at all, as when a node is added, does not
//     count: merging would not find it.)
//
// sync.Map, the library's answer to the same problem, made a lookup
// 7-90 ns slower (Filter 136 ns against 224 ns a call at 5,000 nodes on
// the 2-core machine), on the path every cycle takes.
//
// Writers (add, remove) hold the cache's mu.
type cellMap struct {
	base   atomic.Pointer[map[string]*atomic.Pointer[nodeView]]
	mu     sync.RWMutex
	recent map[string]*atomic.Pointer[nodeView]
	// inRecent is len(recent); misses counts reads that found their node
	// there.
	inRecent, misses atomic.Int64
}

// smallBase is the size below which every new node is merged at once.
const smallBase = 512

// newCellMap is an empty map; base is never nil after it.
func newCellMap() *cellMap {
	c := &cellMap{}
	c.base.Store(&map[string]*atomic.Pointer[nodeView]{})
	return c
}

func (c *cellMap) baseMap() map[string]*atomic.Pointer[nodeView] { return *c.base.Load() }

// load is the node's cell, nil if it has none.
func (c *cellMap) load(node string) *atomic.Pointer[nodeView] {
	if cell := (*c.base.Load())[node]; cell != nil {
		return cell
	}
	if c.inRecent.Load() == 0 {
		return nil
	}
	c.mu.RLock()
	cell := c.recent[node]
	c.mu.RUnlock()
	if cell != nil && c.misses.Add(1) >= c.inRecent.Load() {
		c.mu.Lock()
		c.merge()
		c.mu.Unlock()
	}
	return cell
}

// merge moves recent into a new base. The caller holds mu for writing.
func (c *cellMap) merge() {
	if len(c.recent) == 0 {
		return
	}
	b := maps.Clone(c.baseMap())
	maps.Copy(b, c.recent)
	c.base.Store(&b)
	c.recent = nil
	c.inRecent.Store(0)
	c.misses.Store(0)
}

// add gives node a cell. The caller holds the cache's mu.
func (c *cellMap) add(node string, cell *atomic.Pointer[nodeView]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.recent == nil {
		c.recent = map[string]*atomic.Pointer[nodeView]{}
	}
	c.recent[node] = cell
	c.inRecent.Store(int64(len(c.recent)))
	if n := len(c.baseMap()); n < smallBase || len(c.recent) >= n/8 {
		c.merge()
	}
}

// remove forgets node's cell. The caller holds the cache's mu.
func (c *cellMap) remove(node string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.recent[node]; ok {
		delete(c.recent, node)
		c.inRecent.Store(int64(len(c.recent)))
		return
	}
	if _, ok := c.baseMap()[node]; ok {
		b := maps.Clone(c.baseMap())
		delete(b, node)
		c.base.Store(&b)
	}
}

// each calls f for every cell until f returns false.
func (c *cellMap) each(f func(node string, cell *atomic.Pointer[nodeView]) bool) {
	for n, cell := range c.baseMap() {
		if !f(n, cell) {
			return
		}
	}
	c.mu.RLock()
	recent := maps.Clone(c.recent)
	c.mu.RUnlock()
	for n, cell := range recent {
		if !f(n, cell) {
			return
		}
	}
}

// len is the number of nodes with a cell.
func (c *cellMap) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.baseMap()) + len(c.recent)
}
