//go:build cluster

package cluster

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nicaffinity/nicaffinity/internal/realcluster"
)

// TestClusterHostStateSeesChanges: the record every TestCluster* compares
// before and after its cluster sees what a leaking cluster would leave: a
// cgroup, a kubelet directory, a network link. It shows the host check can
// fail.
func TestClusterHostStateSeesChanges(t *testing.T) {
	before := realcluster.HostState()
	var undo []func()
	defer func() {
		for _, u := range undo {
			u()
		}
	}()
	cg := filepath.Join("/sys/fs/cgroup/memory", "nicaffinity-hoststate-check")
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	undo = append(undo, func() { os.Remove(cg) })
	if _, err := os.Stat("/var/lib/kubelet"); os.IsNotExist(err) {
		if err := os.Mkdir("/var/lib/kubelet", 0o755); err != nil {
			t.Fatal(err)
		}
		undo = append(undo, func() { os.Remove("/var/lib/kubelet") })
	}
	after := realcluster.HostState()
	for _, key := range []string{"cgroups /sys/fs/cgroup/memory", "/var/lib/kubelet"} {
		if cmp.Equal(before[key], after[key]) {
			t.Errorf("%s: the host record did not change: %q", key, after[key])
		}
	}
	for _, u := range undo {
		u()
	}
	undo = nil
	if diff := cmp.Diff(before, realcluster.HostState()); diff != "" {
		t.Errorf("undone, the host differs (-before,+after):\n%s", diff)
	}
}
