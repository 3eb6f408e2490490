// Package machinestest builds broken and test-only sysfs trees on the
// machine catalogue's tree writer (pkg/machines): the states of a GPU node
// whose GPUDirect RDMA fails, for the tests of doctor and the plugin. No
// product package imports it.
package machinestest

import (
	"os"

	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// Breakage is one way a GPU node's GPUDirect RDMA fails, applied to a tree
// that GPUDirectReady made ready. The trees are what the kernel shows in
// that state; doctor and the plugin are tested against them.
type Breakage struct {
	Name  string
	Break func(*machines.Tree)
}

// Breakages are the broken states of a ready HGX H100 (HGXH100 then
// GPUDirectReady) that doctor node tells apart.
var Breakages = []Breakage{
	// ACS P2P redirect on the switch port above GPU 0 (a BIOS with ACS on).
	{Name: "acs-redirect", Break: func(t *machines.Tree) { t.ACS(t.BridgeAbove(t.GPUAddresses()[0]), topology.ACSRedirectBits) }},
	// nvidia-peermem not loaded, and the proprietary nvidia module (no dma-buf).
	{Name: "no-peermem", Break: func(t *machines.Tree) {
		t.RemoveModule("nvidia_peermem")
		t.Module("nvidia", "POE")
	}},
	// mlx5_0's port down: cable out, link disabled.
	{Name: "port-down", Break: func(t *machines.Tree) {
		t.SetPort("mlx5_0", 1, "state", "1: DOWN")
		t.SetPort("mlx5_0", 1, "phys_state", "3: Disabled")
	}},
	// mlx5_0 in Ethernet mode with only a RoCE v1 GID.
	{Name: "roce-no-v2-gid", Break: func(t *machines.Tree) {
		t.SetPort("mlx5_0", 1, "link_layer", "Ethernet")
		t.GID("mlx5_0", 1, 0, "fe80:0000:0000:0000:0ac0:ebff:fe00:0001", "IB/RoCE v1")
	}},
	// mlx5_0's IB port in Init: link up, no subnet manager.
	{Name: "ib-port-init", Break: func(t *machines.Tree) {
		t.SetPort("mlx5_0", 1, "state", "2: INIT")
		t.SetPort("mlx5_0", 1, "phys_state", "5: LinkUp")
	}},
	// ib_uverbs not loaded: no /dev/infiniband/uverbs*.
	{Name: "no-dev-infiniband", Break: func(t *machines.Tree) {
		t.RemoveModule("ib_uverbs")
		t.RemoveAll("class/infiniband_verbs")
	}},
}

// ReadyHGXH100 builds an HGX H100 whose GPUDirect RDMA facts all read
// good, then applies the breakages named (none: ready).
func ReadyHGXH100(names ...string) func(*machines.Tree) {
	return func(t *machines.Tree) {
		machines.HGXH100(t)
		t.GPUDirectReady()
		for _, n := range names {
			found := false
			for _, b := range Breakages {
				if b.Name == n {
					b.Break(t)
					found = true
				}
			}
			if !found {
				t.Fail(os.ErrNotExist)
			}
		}
	}
}
