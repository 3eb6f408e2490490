package topology_test

import (
	"testing"

	"github.com/nicaffinity/nicaffinity/pkg/profiles"
)

// BenchmarkMatrix computes every pair of an 8-GPU, 16-port HGX H100 node
// (what the exporter does on every publish).
func BenchmarkMatrix(b *testing.B) {
	topo, err := profiles.Load("oci-bm-gpu-h100-8-8gpu-8x2portcx7")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = topo.Matrix()
	}
}
