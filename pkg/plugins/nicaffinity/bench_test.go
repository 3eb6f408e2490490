//go:build !race

package nicaffinity_test

import (
	"strings"
	"testing"

	"github.com/nicaffinity/nicaffinity/internal/pluginbench"
)

// BenchmarkFilter and BenchmarkScore run the shared micro-benchmarks
// (nicaffinity-sim bench prints the same ones).
func BenchmarkFilter(b *testing.B) { run(b, "Filter/") }

func BenchmarkScore(b *testing.B) { run(b, "Score/") }

func run(b *testing.B, prefix string) {
	for _, bm := range pluginbench.Benchmarks {
		if name, ok := strings.CutPrefix(bm.Name, prefix); ok {
			b.Run(name, bm.F)
		}
	}
}
