package nicaffinity

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

// TestViewIndex grows an index to 3000 nodes (through several doublings)
// while readers look nodes up and writers keep replacing views, and checks
// that a reader never sees half of one version and half of another (every
// word of a version carries its number), that every node ends with its
// latest view and that unknown nodes find none. go test -race checks the
// readers against the writers.
func TestViewIndex(t *testing.T) {
	var x viewIndex
	const n = 3000
	version := func(v uint64) hotView {
		return hotView{pub: &published{why: fmt.Sprint(v)}, meta: v << 32, score: v, plain: v}
	}
	consistent := func(h hotView) bool {
		return h.pub != nil && h.meta>>32 == h.score && h.score == h.plain && h.pub.why == fmt.Sprint(h.score)
	}
	var mu sync.Mutex // the store's lock: one writer at a time
	done := make(chan struct{})
	var wg sync.WaitGroup
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				for i := 0; i < n; i += 97 {
					if h := x.load(fmt.Sprint("node-", i)); h.pub != nil && (!consistent(h) || h.score%n != uint64(i)) {
						t.Errorf("node-%d: torn or foreign view %+v", i, h)
						return
					}
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // rewrites the first nodes again and again while the table grows
		defer wg.Done()
		for round := uint64(1); ; round++ {
			select {
			case <-done:
				return
			default:
			}
			mu.Lock()
			for i := uint64(0); i < 50; i++ {
				x.store(fmt.Sprint("node-", i), version(i+n*(10+round%5)))
			}
			mu.Unlock()
		}
	}()
	for i := 0; i < n; i++ {
		mu.Lock()
		x.store(fmt.Sprint("node-", i), version(uint64(i)))
		mu.Unlock()
	}
	close(done)
	wg.Wait()
	for i := 0; i < n; i += 3 {
		x.store(fmt.Sprint("node-", i), version(uint64(i+n))) // a new view of a known node
	}
	if x.count != n {
		t.Errorf("index counts %d nodes, want %d", x.count, n)
	}
	for i := 0; i < n; i++ {
		h := x.load(fmt.Sprint("node-", i))
		switch {
		case i%3 == 0 && h.score != uint64(i+n):
			t.Fatalf("node-%d: %+v, want its latest view %d", i, h, i+n)
		case i%3 != 0 && i >= 50 && h.score != uint64(i):
			t.Fatalf("node-%d: %+v, want view %d", i, h, i)
		case !consistent(h):
			t.Fatalf("node-%d: torn view %+v", i, h)
		}
	}
	if h := x.load("node-x"); h.pub != nil {
		t.Errorf("unknown node found %+v", h)
	}
}

// TestHotView: what the index keeps inline is the view's answers, bit for
// bit, and a node without a view says so.
func TestHotView(t *testing.T) {
	_, st := newTestPlugin(t, nil, handNRT("n", 0, 1, 4, 5, 6))
	v, _ := st.View("n")
	h := makeHotView(&published{view: v})
	if !h.hasView() || h.stale() || h.gpus() != 8 || h.answered() != 8 {
		t.Fatalf("hot view %+v: has view %v, stale %v, %d GPUs, %d answered", h, h.hasView(), h.stale(), h.gpus(), h.answered())
	}
	for g := 0; g < 8; g++ {
		a := v.answers[g]
		if h.feasible(g) != a.feasible || h.scoreOf(g) != int64(a.score) || h.plainOf(g) != int64(a.plain) {
			t.Errorf("%d GPUs: inline %v/%d/%d, view %+v", g, h.feasible(g), h.scoreOf(g), h.plainOf(g), a)
		}
	}
	stale := *v
	stale.stale = true
	if h := makeHotView(&published{view: &stale}); !h.stale() {
		t.Error("a stale view published as fresh")
	}
	for _, p := range []*published{nil, {why: "bad object"}} {
		h := hotView{}
		if p != nil {
			h = makeHotView(p)
		}
		if h.hasView() || h.answered() != 0 {
			t.Errorf("%+v: published as having a view", p)
		}
		if v, why := h.viewOrWhy(); v != nil || why == "" {
			t.Errorf("%+v: viewOrWhy = %v, %q", p, v, why)
		}
	}
}

// TestViewIndexLongNames: names longer than a slot's inline bytes, and
// names that share those bytes, are told apart by the whole name.
func TestViewIndexLongNames(t *testing.T) {
	if size := unsafe.Sizeof(viewSlot{}); size != 128 {
		t.Errorf("a slot is %d bytes, want two cache lines (128)", size)
	}
	prefix := strings.Repeat("gpu-node.rack-17.zone-b.", 3)[:63]
	var names []string
	for _, tail := range []string{"", "a", "ab", "abc", strings.Repeat("x", 200), strings.Repeat("x", 199) + "y"} {
		names = append(names, prefix+tail)
	}
	var x viewIndex
	for i, n := range names {
		x.store(n, hotView{pub: &published{why: n}, score: uint64(i)})
	}
	for i, n := range names {
		if h := x.load(n); h.pub == nil || h.pub.why != n || h.score != uint64(i) {
			t.Errorf("%d-byte name %d: found %+v", len(n), i, h)
		}
	}
	for _, n := range []string{prefix + "b", prefix + strings.Repeat("x", 198) + "yy", prefix[:62]} {
		if h := x.load(n); h.pub != nil {
			t.Errorf("unknown %d-byte name found %q", len(n), h.pub.why)
		}
	}
}

// TestViewIndexAliases: lookups with the same string find the node through
// an alias, and aliases never answer for another name: a substring that
// shares its address with a longer name, a copy of a name at another
// address, names looked up before the table grew, and so many Node
// objects replaced (fresh copies of every name) that the alias table is
// replaced several times.
func TestViewIndexAliases(t *testing.T) {
	var x viewIndex
	const n = 200
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprint("node-", i)
		x.store(names[i], hotView{pub: &published{why: names[i]}})
	}
	check := func(stage string, asked []string) {
		t.Helper()
		for _, name := range asked {
			if h := x.load(name); h.pub == nil || h.pub.why != name {
				t.Fatalf("%s: %q found %+v", stage, name, h.pub)
			}
		}
	}
	check("by name", names)
	if a := x.aliases.Load(); a == nil || a.used.Load() < n {
		t.Fatalf("no alias for each of %d names looked up", n)
	}
	check("by alias", names)

	// "node-1" shares its address with "node-10" when cut from it.
	long := strings.Clone("node-10")
	x.load(long)
	if h := x.load(long[:6]); h.pub == nil || h.pub.why != "node-1" {
		t.Errorf("prefix of an aliased name found %+v, want node-1", h.pub)
	}
	if h := x.load(long[:5]); h.pub != nil {
		t.Errorf("unknown prefix %q found %+v", long[:5], h.pub)
	}

	// Growing the view table keeps slot numbers, so old aliases stay right.
	for i := n; i < 5*n; i++ {
		x.store(fmt.Sprint("node-", i), hotView{pub: &published{why: fmt.Sprint("node-", i)}})
	}
	check("after growth", names)

	// Every Node replaced ten times: new strings, new aliases.
	replaced := 0
	for round := 0; round < 10; round++ {
		fresh := make([]string, len(names))
		for i, name := range names {
			fresh[i] = strings.Clone(name)
		}
		before := x.aliases.Load()
		check(fmt.Sprint("replaced Nodes, round ", round), fresh)
		check(fmt.Sprint("replaced Nodes again, round ", round), fresh)
		if x.aliases.Load() != before {
			replaced++
		}
	}
	if replaced == 0 {
		t.Error("the alias table was never replaced as it filled up")
	}
	if a := x.aliases.Load(); 2*a.used.Load() > int64(len(a.keys)) {
		t.Errorf("alias table %d of %d full", a.used.Load(), len(a.keys))
	}
}

// TestViewIndexAliasesConcurrent: readers add aliases for the same and for
// copied names at once while the writer grows the table (go test -race).
func TestViewIndexAliasesConcurrent(t *testing.T) {
	var x viewIndex
	var mu sync.Mutex
	const n = 2000
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprint("node-", i)
	}
	var wg sync.WaitGroup
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 0; round < 20; round++ {
				for i := r; i < n; i += 7 {
					name := names[i]
					if round%2 == 1 {
						name = strings.Clone(name)
					}
					if h := x.load(name); h.pub != nil && h.pub.why != names[i] {
						t.Errorf("%s found %q", names[i], h.pub.why)
						return
					}
				}
			}
		}()
	}
	for i, name := range names {
		mu.Lock()
		x.store(name, hotView{pub: &published{why: names[i]}})
		mu.Unlock()
	}
	wg.Wait()
	for _, name := range names {
		if h := x.load(name); h.pub == nil || h.pub.why != name {
			t.Fatalf("%s found %+v", name, h.pub)
		}
	}
}

// BenchmarkViewIndexCold looks 5000 nodes up in turn, with names scattered
// over the heap and the caches kept busy between lookups as a scheduling
// cycle keeps them (16 random reads of a 256 MiB buffer): "busy" is that
// background alone, "by-name" and "by-alias" add a lookup each way.
func BenchmarkViewIndexCold(b *testing.B) {
	const n = 5000
	var x viewIndex
	names := make([]string, n)
	var padding [][]byte
	for i, j := range rand.Perm(n) {
		names[i] = strings.Clone(fmt.Sprintf("gpu-%05d", j))
		padding = append(padding, make([]byte, 16<<10)) // scatter the names
		x.store(names[i], hotView{pub: &published{}, meta: 1})
	}
	busy := make([]int64, 32<<20)
	r := rand.New(rand.NewPCG(1, 2))
	var sink uint64
	for _, mode := range []string{"busy", "by-name", "by-alias"} {
		b.Run(mode, func(b *testing.B) {
			t := x.cur.Load()
			for i := 0; b.Loop(); i++ {
				for k := 0; k < 16; k++ {
					sink += uint64(busy[r.IntN(len(busy))])
				}
				switch name := names[i%n]; mode {
				case "by-name":
					sink += t.slots[t.find(name)].read().meta
				case "by-alias":
					sink += x.load(name).meta
				}
			}
		})
	}
	runtime.KeepAlive(padding)
	if sink == 42 {
		b.Log(sink)
	}
}
