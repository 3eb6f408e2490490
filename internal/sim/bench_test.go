package sim

import (
	"context"
	"testing"
)

// TestBench runs the A B B A measurement on a small cluster: both profiles
// bind every pod and report a throughput.
func TestBench(t *testing.T) {
	results, ratio, err := Bench(context.Background(), BenchSpec{Nodes: 20, Pods: 60}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.PodsPerSec <= 0 || r.LatencyP99Ms < r.LatencyP50Ms {
			t.Errorf("%+v", r)
		}
	}
	t.Logf("%+v ratio %.2f", results, ratio)
	if ratio <= 0 {
		t.Errorf("ratio %v", ratio)
	}
}
