package nicaffinity

import (
	"hash/maphash"
	"runtime"
	"strings"
	"sync/atomic"
)

// viewIndex finds a node's published view by name. Filter and Score ask it
// for every node of every cycle from many goroutines, and at thousands of
// nodes what that costs is cache misses, not arithmetic: a Go map of names
// to cells to views took five dependent loads a lookup (map control word,
// slot, name bytes, cell, view), most of them misses under a busy
// scheduler at 5000 nodes. So the index is a small open-addressing table
// of (hash fingerprint, slot) words, which stays in the CPU's caches, over
// one dense slice of slots that each hold the name (its first bytes inline)
// and, inline too, what the common path of Filter and Score reads
// (hotView): a lookup touches one slot.
//
// Reads take no lock. A writer (holding the store's lock) fills a new slot
// before it stores the index word that points to it, and updates a slot
// under a sequence counter, so a reader sees one whole version of a node.
// The table doubles when full; a reader still on the old table sees the
// views it held a moment before. Names are never removed: a deleted node's
// slot stays with an empty view.
type viewIndex struct {
	cur   atomic.Pointer[viewTable]
	count int // slots used in cur (under the store's lock)
}

type viewTable struct {
	seed maphash.Seed
	mask uint64
	// index words are 0 (empty) or the name hash's top 32 bits << 32 |
	// slot+1; there are twice as many as slots.
	index []atomic.Uint64
	slots []viewSlot
}

// viewSlot is one node, two cache lines: the view words in the first, the
// name in both.
type viewSlot struct {
	seq    atomic.Uint64 // odd while a writer updates pub and hot
	pub    atomic.Pointer[published]
	hot    [3]atomic.Uint64
	name   string // set before the slot is indexed, never changed after
	inline [64]byte
	_      [8]byte
}

// is reports whether the slot holds node, reading the heap copy of the
// name only for names longer than the inline bytes.
func (s *viewSlot) is(node string) bool {
	if len(s.name) != len(node) {
		return false
	}
	if len(node) <= len(s.inline) {
		return string(s.inline[:len(node)]) == node
	}
	return s.name == node
}

// hotView is a node's view as Filter's and Score's common path reads it,
// packed into three words: whether there is a view, staleness, the GPU
// count, and the precomputed answers for common requests of up to
// maxInlineGPUs-1 GPUs. pub has the rest.
type hotView struct {
	pub *published
	// meta: bit 0 has a view, bit 1 stale, bits 8-15 GPUs, bits 16-23
	// answered, bits 32-47 feasible[g].
	meta uint64
	// score and plain hold byte g of answers[g].score and .plain.
	score, plain uint64
}

// maxInlineGPUs is how many answers hotView holds (requests of 1 to 7
// GPUs); larger requests read the view's answers.
const maxInlineGPUs = 8

func makeHotView(p *published) hotView {
	h := hotView{pub: p}
	v := p.view
	if v == nil {
		return h
	}
	h.meta = 1 | uint64(min(len(v.c.GPUs), 255))<<8
	if v.stale {
		h.meta |= 2
	}
	n := min(len(v.answers), maxInlineGPUs)
	h.meta |= uint64(n) << 16
	for g := 0; g < n; g++ {
		a := v.answers[g]
		if a.feasible {
			h.meta |= 1 << (32 + g)
		}
		h.score |= uint64(a.score) << (8 * g)
		h.plain |= uint64(a.plain) << (8 * g)
	}
	return h
}

func (h hotView) viewOrWhy() (*nodeView, string) { return h.pub.viewOrWhy() }
func (h hotView) hasView() bool                  { return h.meta&1 != 0 }
func (h hotView) stale() bool                    { return h.meta&2 != 0 }
func (h hotView) gpus() int                      { return int(h.meta >> 8 & 0xff) }
func (h hotView) answered() int                  { return int(h.meta >> 16 & 0xff) }
func (h hotView) feasible(g int) bool {
	return h.meta&(1<<(32+g)) != 0
}
func (h hotView) scoreOf(g int) int64 { return int64(h.score >> (8 * g) & 0xff) }
func (h hotView) plainOf(g int) int64 { return int64(h.plain >> (8 * g) & 0xff) }

// load is the node's view; pub is nil for a node never stored.
func (x *viewIndex) load(node string) hotView {
	t := x.cur.Load()
	if t == nil {
		return hotView{}
	}
	h := maphash.String(t.seed, node)
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		w := t.index[i].Load()
		if w == 0 {
			return hotView{}
		}
		if w>>32 == h>>32 {
			if s := &t.slots[uint32(w)-1]; s.is(node) {
				return s.read()
			}
		}
	}
}

func (s *viewSlot) read() hotView {
	for {
		seq := s.seq.Load()
		if seq&1 != 0 {
			runtime.Gosched() // a writer is mid-update; it is never long
			continue
		}
		h := hotView{pub: s.pub.Load(), meta: s.hot[0].Load(), score: s.hot[1].Load(), plain: s.hot[2].Load()}
		if s.seq.Load() == seq {
			return h
		}
	}
}

func (s *viewSlot) write(h hotView) {
	s.seq.Add(1)
	s.pub.Store(h.pub)
	s.hot[0].Store(h.meta)
	s.hot[1].Store(h.score)
	s.hot[2].Store(h.plain)
	s.seq.Add(1)
}

// store publishes a node's view; the caller holds the store's lock.
func (x *viewIndex) store(node string, v hotView) {
	t := x.cur.Load()
	if t == nil {
		t = x.grow(nil)
	}
	h := maphash.String(t.seed, node)
	i := h & t.mask
	for w := t.index[i].Load(); w != 0; w = t.index[i].Load() {
		if s := &t.slots[uint32(w)-1]; w>>32 == h>>32 && s.is(node) {
			s.write(v)
			return
		}
		i = (i + 1) & t.mask
	}
	if x.count == len(t.slots) {
		x.grow(t)
		x.store(node, v)
		return
	}
	s := &t.slots[x.count]
	s.name = strings.Clone(node)
	copy(s.inline[:], node)
	s.write(v)
	x.count++
	t.index[i].Store(h>>32<<32 | uint64(x.count))
}

// grow builds a table of twice the size with every node of the old one and
// swaps it in.
func (x *viewIndex) grow(old *viewTable) *viewTable {
	slots := 32
	if old != nil {
		slots = 2 * len(old.slots)
	}
	t := &viewTable{seed: maphash.MakeSeed(), mask: uint64(2*slots - 1), index: make([]atomic.Uint64, 2*slots), slots: make([]viewSlot, slots)}
	for n := 0; old != nil && n < x.count; n++ {
		from, to := &old.slots[n], &t.slots[n]
		to.name, to.inline = from.name, from.inline
		to.write(from.read())
		h := maphash.String(t.seed, to.name)
		i := h & t.mask
		for t.index[i].Load() != 0 {
			i = (i + 1) & t.mask
		}
		t.index[i].Store(h>>32<<32 | uint64(n+1))
	}
	x.cur.Store(t)
	return t
}
