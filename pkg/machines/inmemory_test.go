package machines_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/machines/machinestest"
)

// TestInMemoryEqualsDisk: a tree built in memory reads, through the real
// sysfs reader, exactly as the same tree written to disk, for every shape
// of the catalogue and every breakage of GPUDirect RDMA the tests use
// (modules, IOMMU, ACS, ports, verbs devices): what Load reads is what a
// host with that tree would show.
func TestInMemoryEqualsDisk(t *testing.T) {
	builds := map[string]func(*machines.Tree){}
	for _, m := range machines.Shapes {
		builds[m.Name] = m.Build
	}
	for _, b := range machinestest.Breakages {
		builds["hgx-h100 "+b.Name] = machinestest.ReadyHGXH100(b.Name)
	}
	builds["hgx-h100 ready"] = machinestest.ReadyHGXH100()
	for name, build := range builds {
		t.Run(name, func(t *testing.T) {
			disk, err := machines.Discover(t.TempDir(), build)
			if err != nil {
				t.Fatal(err)
			}
			mem, err := machines.Discover("", build)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(disk, mem); diff != "" {
				t.Errorf("in memory against on disk (-disk,+memory):\n%s", diff)
			}
		})
	}
}
