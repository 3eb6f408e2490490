package nicaffinity

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// TestCellMap: every node added is found, by load and by each, across
// merges at start (small maps), by size, and by reads; removed nodes are
// gone wherever they were; and readers racing a writer see each node
// either absent or with its own cell.
func TestCellMap(t *testing.T) {
	c := newCellMap()
	cells := map[string]*atomic.Pointer[nodeView]{}
	add := func(n string) {
		cell := &atomic.Pointer[nodeView]{}
		cells[n] = cell
		c.add(n, cell)
	}
	check := func(when string) {
		t.Helper()
		for n, cell := range cells {
			if got := c.load(n); got != cell {
				t.Fatalf("%s: load(%s) = %p, want %p", when, n, got, cell)
			}
		}
		seen := 0
		c.each(func(n string, cell *atomic.Pointer[nodeView]) bool {
			if cells[n] != cell {
				t.Fatalf("%s: each gave %s a cell not its own", when, n)
			}
			seen++
			return true
		})
		if seen != len(cells) || c.len() != len(cells) {
			t.Fatalf("%s: each saw %d, len %d, want %d", when, seen, c.len(), len(cells))
		}
		if c.load("nobody") != nil {
			t.Fatalf("%s: an unknown node has a cell", when)
		}
	}
	for i := 0; i < 3000; i++ {
		add(fmt.Sprint("n", i))
	}
	if c.inRecent.Load() == 0 {
		t.Fatalf("no node waits in recent after 3000 adds: the test does not exercise it")
	}
	check("after adds")
	if c.inRecent.Load() != 0 {
		t.Errorf("reads found every recent node, yet recent holds %d", c.inRecent.Load())
	}
	add("late")
	for _, n := range []string{"late", "n0", "n2999"} {
		c.remove(n)
		delete(cells, n)
	}
	check("after removals")

	var wg sync.WaitGroup
	stop := make(chan struct{})
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for i := 3000; i < 4000; i++ {
					if cell := c.load(fmt.Sprint("n", i)); cell != nil && cell.Load() != nil {
						t.Errorf("n%d: a cell not its own", i)
						return
					}
				}
			}
		}()
	}
	for i := 3000; i < 4000; i++ {
		c.add(fmt.Sprint("n", i), &atomic.Pointer[nodeView]{})
	}
	close(stop)
	wg.Wait()
	if c.len() != len(cells)+1000 {
		t.Errorf("len %d after concurrent adds, want %d", c.len(), len(cells)+1000)
	}
}
