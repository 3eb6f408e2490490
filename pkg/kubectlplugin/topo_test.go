package kubectlplugin

import (
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nicaffinity/nicaffinity/internal/golden"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/machines/machinestest"
	"github.com/nicaffinity/nicaffinity/pkg/nrt/nrttest"
	"github.com/nicaffinity/nicaffinity/pkg/topology/sysfs"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// TestTopoMatrix: an HGX H100 whose GPUs 1 and 2 are taken and whose GPU 0
// has ACS redirect to its NIC, as `kubectl nicaffinity topo` prints it.
func TestTopoMatrix(t *testing.T) {
	tree := machines.New(t.TempDir())
	machinestest.ReadyHGXH100("acs-redirect")(tree)
	if err := tree.Err(); err != nil {
		t.Fatal(err)
	}
	topo, err := sysfs.New(sysfs.WithRoot(tree.Root)).Discover()
	if err != nil {
		t.Fatal(err)
	}
	obj, _ := nrttest.FromTopology("gpu-node-1", topo, nil, 1, 2)
	m, err := BuildMatrix(obj, "nvidia.com/gpu")
	if err != nil {
		t.Fatal(err)
	}
	states := []string{}
	for _, g := range m.GPUs {
		states = append(states, g.State)
	}
	if got := strings.Join(states, ","); got != "free,used,used,free,free,free,free,free" {
		t.Errorf("GPU states %s", got)
	}
	if len(m.Blocked) != 1 || !strings.Contains(m.Blocked[0], "ACS redirect on 0000:14:00.0") {
		t.Errorf("blocked %q", m.Blocked)
	}
	golden.Check(t, filepath.Join("testdata", "topo-hgx-h100-acs.txt"), []byte(m.Format()), *update)
}

func TestTopoMatrixBadObject(t *testing.T) {
	obj := nrttest.HalfNICs("n", 0)
	obj.Zones = obj.Zones[:1]
	if _, err := BuildMatrix(obj, "nvidia.com/gpu"); err == nil || !strings.Contains(err.Error(), "NodeResourceTopology n:") {
		t.Errorf("err = %v, want one naming the object", err)
	}
}

// TestTopoMatrixP2C: on a GB200 tray the published levels are SYS, and the
// pairs NCCL reaches at P2C are marked "+".
func TestTopoMatrixP2C(t *testing.T) {
	topo, err := machines.Load("gb200-tray-4gpu-8nic")
	if err != nil {
		t.Fatal(err)
	}
	obj, _ := nrttest.FromTopology("gb200-1", topo, nil)
	m, err := BuildMatrix(obj, "nvidia.com/gpu")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(m.GPUs[0].P2CNICs, ","); got != "mlx5_0,mlx5_1" {
		t.Errorf("GPU 0's P2C NICs %q, want mlx5_0,mlx5_1", got)
	}
	golden.Check(t, filepath.Join("testdata", "topo-gb200-p2c.txt"), []byte(m.Format()), *update)
}
