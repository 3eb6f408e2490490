package nicaffinity

import (
	"hash/maphash"
	"runtime"
	"strings"
	"sync/atomic"
	"unsafe"
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
// (hotView). In front of it, aliases (aliasTable) find the slot from the
// address of the caller's name string without reading the name: the
// common lookup touches the alias word and the slot's first line.
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
	// aliases: see aliasTable.
	aliases atomic.Pointer[aliasTable]
}

// aliasTable maps the address and length of a name string a caller holds
// to the node's slot. The scheduler asks with the Name of its Node object,
// the same string cycle after cycle until the Node changes; after the
// first lookup by name, the next ones find the slot without hashing and
// comparing the name's bytes, which at thousands of nodes cost a cache
// miss of their own: in a 5000-node bench run on 2 cores the CPU spent in
// lookups went from 3.6 s to 1.9 s (BenchmarkViewIndexCold, names scattered
// over the heap: 17-22 ns a lookup by name, 10-18 ns by alias, on top of a
// busy background). Readers add aliases without locks; a table half
// full is replaced by an empty one, so the aliases of Node objects that
// were replaced since do not pile up. A key holds its string, so while the
// alias exists the address cannot be reused for another name. Slot
// numbers survive the view table's growth (grow keeps them).
type aliasTable struct {
	mask uint64
	keys []atomic.Pointer[byte]
	// vals are len<<32 | slot+1; 0 while the alias is being added.
	vals []atomic.Uint64
	used atomic.Int64
}

// maxAliasProbes bounds a probe sequence; a table at most half full rarely
// needs more than a few, and an alias that finds no room is not added.
const maxAliasProbes = 32

// addrHash spreads string addresses (aligned, close together) over the
// table (Fibonacci hashing; the top bits are the best mixed).
func addrHash(p *byte) uint64 {
	return uint64(uintptr(unsafe.Pointer(p))) * 0x9e3779b97f4a7c15
}

// aliasOf is the slot of the string at p of length n, or -1.
func (a *aliasTable) aliasOf(p *byte, n int) int {
	h := addrHash(p)
	for i, probes := h>>32&a.mask, 0; probes < maxAliasProbes; i, probes = (i+1)&a.mask, probes+1 {
		k := a.keys[i].Load()
		if k == nil {
			return -1
		}
		if v := a.vals[i].Load(); k == p && v>>32 == uint64(n) {
			return int(uint32(v)) - 1
		}
	}
	return -1
}

// addAlias records that the string at p of length n names slot; slots is
// the view table's size, which sizes a new alias table.
func (x *viewIndex) addAlias(p *byte, n, slot, slots int) {
	a := x.aliases.Load()
	if a == nil || 2*a.used.Load() >= int64(len(a.keys)) {
		size := 64
		for size < 2*slots {
			size *= 2
		}
		fresh := &aliasTable{mask: uint64(size - 1), keys: make([]atomic.Pointer[byte], size), vals: make([]atomic.Uint64, size)}
		if !x.aliases.CompareAndSwap(a, fresh) {
			return // another reader replaced it: this alias waits for the next lookup
		}
		a = fresh
	}
	h := addrHash(p)
	for i, probes := h>>32&a.mask, 0; probes < maxAliasProbes; i, probes = (i+1)&a.mask, probes+1 {
		if a.keys[i].CompareAndSwap(nil, p) {
			a.vals[i].Store(uint64(n)<<32 | uint64(slot+1))
			a.used.Add(1)
			return
		}
	}
}

type viewTable struct {
	seed maphash.Seed
	mask uint64
	// index words are 0 (empty) or indexWord: the name hash's top 32 bits
	// << 32 | slot+1; there are twice as many as slots.
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
	if t == nil || len(node) == 0 {
		return hotView{}
	}
	p := unsafe.StringData(node)
	if a := x.aliases.Load(); a != nil {
		// A slot numbered past this table's end was added to a newer one.
		if slot := a.aliasOf(p, len(node)); slot >= 0 && slot < len(t.slots) {
			return t.slots[slot].read()
		}
	}
	slot := t.find(node)
	if slot < 0 {
		return hotView{}
	}
	x.addAlias(p, len(node), slot, len(t.slots))
	return t.slots[slot].read()
}

// find is the node's slot, found by name, or -1.
func (t *viewTable) find(node string) int {
	slot, _, _ := t.probe(node)
	return slot
}

// probe walks node's probe sequence: its slot (or -1), where the walk
// ended (for a new node, the empty index word it goes to) and its hash.
func (t *viewTable) probe(node string) (slot int, at, h uint64) {
	h = maphash.String(t.seed, node)
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		w := t.index[i].Load()
		if w == 0 {
			return -1, i, h
		}
		if slot := int(uint32(w)) - 1; w>>32 == h>>32 && t.slots[slot].is(node) {
			return slot, i, h
		}
	}
}

// indexWord points an index word at slot for a name of hash h.
func indexWord(h uint64, slot int) uint64 { return h>>32<<32 | uint64(slot+1) }

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
	slot, free, h := t.probe(node)
	if slot >= 0 {
		t.slots[slot].write(v)
		return
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
	t.index[free].Store(indexWord(h, x.count))
	x.count++
}

// grow builds a table of twice the size with every node of the old one
// (in the same slots, which aliases rely on) and swaps it in.
func (x *viewIndex) grow(old *viewTable) *viewTable {
	slots := 32
	if old != nil {
		slots = 2 * len(old.slots)
	}
	t := &viewTable{seed: maphash.MakeSeed(), mask: uint64(2*slots - 1), index: make([]atomic.Uint64, 2*slots), slots: make([]viewSlot, slots)}
	for n := 0; old != nil && n < x.count; n++ {
		from, to := &old.slots[n], &t.slots[n]
		_, free, h := t.probe(from.name) // not there yet: ends on a free word
		to.name, to.inline = from.name, from.inline
		to.write(from.read())
		t.index[free].Store(indexWord(h, n))
	}
	x.cur.Store(t)
	return t
}
