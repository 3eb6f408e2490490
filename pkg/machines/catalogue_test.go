package machines

import (
	"strings"
	"testing"
)

// TestCatalogue: every name loads, one name per shape, and unknown names
// get an error that lists what is known.
func TestCatalogue(t *testing.T) {
	seen := map[string]bool{}
	for _, n := range Names() {
		if seen[n] {
			t.Errorf("%s named twice", n)
		}
		seen[n] = true
		topo, err := Load(n)
		if err != nil {
			t.Errorf("%s: %v", n, err)
			continue
		}
		if len(topo.GPUs) == 0 {
			t.Errorf("%s: no GPUs", n)
		}
	}
	for _, m := range Shapes {
		if topo, _ := Load(m.Name); topo != nil && len(topo.GPUs) != m.GPUs {
			t.Errorf("%s: %d GPUs, the catalogue says %d", m.Name, len(topo.GPUs), m.GPUs)
		}
	}
	if _, err := Load("hgx-h900"); err == nil || !strings.Contains(err.Error(), "half-nic-8gpu-2nic") {
		t.Errorf("unknown machine: %v", err)
	}
}
