package sim

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nicaffinity/nicaffinity/internal/memapi"
)

// TestInMemoryEqualsAPIServer replays the first seed of make demo's
// scenarios through every column twice, on the in-memory API (the
// default) and on kube-apiserver with etcd (the reference), and wants the
// same figures in every column: the replay's decisions must not depend on
// which API carries them. Latencies are wall-clock and are left out.
//
// NICAFFINITY_MEMAPI_NEGATIVE=drop-binding-annotations is the negative
// switch: the in-memory API then loses what a binding carries (the
// plugin's plan), and the figures must differ.
func TestInMemoryEqualsAPIServer(t *testing.T) {
	var faults []memapi.Option
	negative := os.Getenv("NICAFFINITY_MEMAPI_NEGATIVE") == "drop-binding-annotations"
	if negative {
		faults = append(faults, memapi.DropBindingAnnotations())
	}
	for _, name := range []string{"default", "backlog", "jobs"} {
		t.Run(name, func(t *testing.T) {
			sc := Scenarios[name]
			w := sc.Workload
			w.Seed = 1
			p, err := Prepare(sc.Cluster, w)
			if err != nil {
				t.Fatal(err)
			}
			mem := make([]Result, len(Columns))
			ref := make([]Result, len(Columns))
			var wg sync.WaitGroup
			sem := make(chan struct{}, 2)
			for i, col := range Columns {
				for _, side := range []struct {
					out *Result
					o   RunOptions
				}{{&mem[i], RunOptions{memapi: faults}}, {&ref[i], RunOptions{APIServer: true}}} {
					wg.Go(func() {
						sem <- struct{}{}
						defer func() { <-sem }()
						r, err := Run(context.Background(), p, col, side.o)
						if err != nil {
							t.Errorf("%s (apiserver %v): %v", col.Name, side.o.APIServer, err)
						}
						*side.out = r
					})
				}
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			diff := cmp.Diff(figureSet(ref), figureSet(mem))
			switch {
			case negative && diff == "":
				t.Errorf("negative switch: the figures are equal although the in-memory API dropped the bindings' annotations")
			case !negative && diff != "":
				t.Errorf("figures on kube-apiserver (-) and in memory (+):\n%s", diff)
			}
		})
	}
}
