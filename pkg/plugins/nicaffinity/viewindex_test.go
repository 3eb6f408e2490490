package nicaffinity

import (
	"fmt"
	"sync"
	"testing"
)

// TestViewIndex grows an index to 3000 nodes (through several compactions)
// while readers look nodes up, and checks every node finds its latest view
// and unknown nodes find none (go test -race checks the readers).
func TestViewIndex(t *testing.T) {
	var x viewIndex
	const n = 3000
	views := make([]*published, n)
	for i := range views {
		views[i] = &published{gpus: i}
	}
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
					if p := x.load(fmt.Sprint("node-", i)); p != nil && p.gpus != i && p.gpus != i+n {
						t.Errorf("node-%d: view of %d", i, p.gpus)
						return
					}
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		x.store(fmt.Sprint("node-", i), views[i])
	}
	for i := 0; i < n; i += 3 {
		x.store(fmt.Sprint("node-", i), &published{gpus: i + n}) // a new view of a known node
	}
	close(done)
	wg.Wait()
	if snap := x.cur.Load(); len(snap.ids) < n/2 {
		t.Errorf("only %d of %d nodes compacted into the snapshot", len(snap.ids), n)
	}
	for i := 0; i < n; i++ {
		want := i
		if i%3 == 0 {
			want = i + n
		}
		if p := x.load(fmt.Sprint("node-", i)); p == nil || p.gpus != want {
			t.Fatalf("node-%d: %+v, want view %d", i, p, want)
		}
	}
	if p := x.load("node-x"); p != nil {
		t.Errorf("unknown node found %+v", p)
	}
}
