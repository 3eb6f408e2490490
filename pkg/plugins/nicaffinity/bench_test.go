//go:build !race

package nicaffinity_test

import (
	"flag"
	"strings"
	"testing"

	"github.com/nicaffinity/nicaffinity/internal/pluginbench"
)

// BenchmarkFilter and BenchmarkScore run the shared micro-benchmarks
// (nicaffinity-sim bench prints the same ones).
func BenchmarkFilter(b *testing.B) { run(b, "Filter/") }

func BenchmarkScore(b *testing.B) { run(b, "Score/") }

// BenchmarkCycle: PreFilter, Reserve and Unreserve of one pod.
func BenchmarkCycle(b *testing.B) { run(b, "Cycle/") }

func run(b *testing.B, prefix string) {
	for _, bm := range pluginbench.Benchmarks {
		if name, ok := strings.CutPrefix(bm.Name, prefix); ok {
			b.Run(name, bm.F)
		}
	}
}

// TestMicroBenchmarksRun runs every shared micro-benchmark once, as
// nicaffinity-sim bench does by default, so a benchmark that fails its own
// setup fails here rather than in a user's bench run; Filter and Score
// must also stay at 0 allocations a call.
func TestMicroBenchmarksRun(t *testing.T) {
	if err := flag.Set("test.benchtime", "3x"); err != nil {
		t.Fatal(err)
	}
	for _, bm := range pluginbench.Benchmarks {
		r := testing.Benchmark(bm.F)
		if r.N == 0 {
			t.Errorf("%s: failed", bm.Name)
			continue
		}
		if a := r.AllocsPerOp(); a != 0 && pluginbench.ZeroAllocs(bm.Name) {
			t.Errorf("%s: %d allocations a call, want 0", bm.Name, a)
		}
	}
}
