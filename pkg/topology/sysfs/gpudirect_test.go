package sysfs_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
	"github.com/nicaffinity/nicaffinity/pkg/topology/sysfs"
)

// TestReadGPUDirect: the facts of a ready host as read, and each one as a
// broken host shows it.
func TestReadGPUDirect(t *testing.T) {
	type facts struct {
		Host   *topology.GPUDirect
		ACS    map[string]string // bridge -> state, only those not off
		Ports  []topology.Port   // mlx5_0's
		UVerbs string            // mlx5_0's
	}
	ready := facts{
		Host:   &topology.GPUDirect{PeerMem: "loaded", NVIDIAModule: "open", KernelRelease: "6.8.0", IOMMU: "off", UVerbs: "yes", RDMADrivers: []string{"mlx5_ib"}},
		ACS:    map[string]string{},
		Ports:  []topology.Port{{Number: 1, LinkLayer: "Ethernet", State: "ACTIVE", Rate: "200 Gb/sec (4X HDR)", PhysState: "LinkUp", MTU: 9000, RoCEv2: "yes"}},
		UVerbs: "uverbs0",
	}
	tests := []struct {
		name   string
		brk    func(*machines.Tree)
		kernel string
		want   func(f *facts)
	}{
		{name: "ready", kernel: "6.8.0", want: func(*facts) {}},
		{name: "no kernel given", want: func(f *facts) { f.Host.KernelRelease = "" }},
		{name: "ACS redirect on the switch port", kernel: "6.8.0",
			brk:  func(tr *machines.Tree) { tr.ACS("0000:02:01.0", topology.ACSRedirectBits) },
			want: func(f *facts) { f.ACS["0000:02:01.0"] = "redirect" }},
		{name: "config space unreadable past 64 bytes", kernel: "6.8.0",
			brk:  func(tr *machines.Tree) { tr.WriteBytes("devices/pci0000:00/0000:00:01.0/config", make([]byte, 64)) },
			want: func(f *facts) { f.ACS["0000:00:01.0"] = "" }},
		{name: "peermem not loaded, proprietary driver", kernel: "6.8.0",
			brk: func(tr *machines.Tree) {
				tr.RemoveModule("nvidia_peermem")
				tr.Module("nvidia", "POE")
			},
			want: func(f *facts) { f.Host.PeerMem, f.Host.NVIDIAModule = "absent", "proprietary" }},
		{name: "old MOFED's nv_peer_mem", kernel: "6.8.0",
			brk: func(tr *machines.Tree) {
				tr.RemoveModule("nvidia_peermem")
				tr.Module("nv_peer_mem", "OE")
			},
			want: func(*facts) {}},
		{name: "no nvidia module", kernel: "6.8.0",
			brk:  func(tr *machines.Tree) { tr.RemoveModule("nvidia") },
			want: func(f *facts) { f.Host.NVIDIAModule = "absent" }},
		{name: "IOMMU translating", kernel: "6.8.0",
			brk:  func(tr *machines.Tree) { tr.IOMMU("DMA-FQ", "dmar0") },
			want: func(f *facts) { f.Host.IOMMU = "translated" }},
		{name: "IOMMU passthrough", kernel: "6.8.0",
			brk:  func(tr *machines.Tree) { tr.IOMMU("identity", "dmar0") },
			want: func(f *facts) { f.Host.IOMMU = "passthrough" }},
		{name: "port down", kernel: "6.8.0",
			brk: func(tr *machines.Tree) {
				tr.SetPort("mlx5_0", 1, "state", "1: DOWN")
				tr.SetPort("mlx5_0", 1, "phys_state", "3: Disabled")
			},
			want: func(f *facts) { f.Ports[0].State, f.Ports[0].PhysState = "DOWN", "Disabled" }},
		{name: "only RoCE v1 GIDs", kernel: "6.8.0",
			brk: func(tr *machines.Tree) {
				tr.GID("mlx5_0", 1, 1, "fe80:0000:0000:0000:0ac0:ebff:fe00:0001", "IB/RoCE v1")
			},
			want: func(f *facts) { f.Ports[0].RoCEv2 = "no" }},
		{name: "a RoCE v2 type on an empty GID does not count", kernel: "6.8.0",
			brk: func(tr *machines.Tree) {
				tr.GID("mlx5_0", 1, 1, "0000:0000:0000:0000:0000:0000:0000:0000", "RoCE v2")
			},
			want: func(f *facts) { f.Ports[0].RoCEv2 = "no" }},
		{name: "no ib_uverbs", kernel: "6.8.0",
			brk: func(tr *machines.Tree) {
				tr.RemoveModule("ib_uverbs")
				os.RemoveAll(filepath.Join(tr.Root, "class", "infiniband_verbs"))
			},
			want: func(f *facts) { f.UVerbs = "no" }},
		{name: "no module list at all", kernel: "6.8.0",
			brk: func(tr *machines.Tree) { os.RemoveAll(filepath.Join(tr.Root, "module")) },
			want: func(f *facts) {
				f.Host.PeerMem, f.Host.NVIDIAModule, f.Host.RDMADrivers = "", "", nil
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tree := small(t)
			tree.GPUDirectReady()
			if tc.brk != nil {
				tc.brk(tree)
			}
			if err := tree.Err(); err != nil {
				t.Fatal(err)
			}
			topo, err := sysfs.New(sysfs.WithRoot(tree.Root), sysfs.WithKernelRelease(tc.kernel)).Discover()
			if err != nil {
				t.Fatal(err)
			}
			want := ready
			host := *ready.Host
			want.Host, want.ACS, want.Ports = &host, map[string]string{}, append([]topology.Port(nil), ready.Ports...)
			tc.want(&want)
			got := facts{Host: topo.GPUDirect, ACS: map[string]string{}}
			for _, b := range topo.Bridges {
				if b.ACS != topology.ACSOff {
					got.ACS[b.Address] = b.ACS
				}
			}
			for _, n := range topo.NICs {
				if n.Name == "mlx5_0" {
					got.Ports, got.UVerbs = n.Ports, n.UVerbs
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("facts (-want,+got):\n%s", diff)
			}
		})
	}
}

// TestGPUDirectBadInput: malformed readiness files are errors that name
// the file; nothing hangs or grows without bound.
func TestGPUDirectBadInput(t *testing.T) {
	const pf = "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0"
	tests := []struct {
		name    string
		brk     func(*machines.Tree)
		wantErr string
	}{
		{"MTU not a number", func(tr *machines.Tree) { tr.WriteFile(pf+"/net/net-mlx5_0/mtu", "big") }, `net-mlx5_0/mtu: "big" is not an MTU`},
		{"MTU absurd", func(tr *machines.Tree) { tr.WriteFile(pf+"/net/net-mlx5_0/mtu", "99999999999") }, "is not an MTU"},
		{"dev_port not a number", func(tr *machines.Tree) { tr.WriteFile(pf+"/net/net-mlx5_0/dev_port", "one") }, `dev_port: "one" is not a port index`},
		{"config space too long", func(tr *machines.Tree) { tr.WriteBytes("devices/pci0000:00/0000:00:01.0/config", make([]byte, 5000)) }, "0000:00:01.0/config: longer than 4096 bytes"},
		{"capability list loops", func(tr *machines.Tree) {
			b := make([]byte, 4096)
			b[0x100], b[0x102], b[0x103] = 0x01, 0x01, 0x10 // ID 1, version 1, next 0x100
			tr.WriteBytes("devices/pci0000:00/0000:00:01.0/config", b)
		}, "0000:00:01.0/config: extended capability list loops"},
		{"too many GIDs", func(tr *machines.Tree) {
			for i := 0; i < 300; i++ {
				tr.GID("mlx5_0", 1, i, "0000:0000:0000:0000:0000:0000:0000:0000", "RoCE v2")
			}
		}, "300 GID entries, at most 256"},
		{"config is a FIFO", func(tr *machines.Tree) {
			p := filepath.Join(tr.Root, "devices/pci0000:00/0000:00:01.0/config")
			os.Remove(p)
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tree := small(t)
			tree.GPUDirectReady()
			tc.brk(tree)
			if err := tree.Err(); err != nil {
				t.Fatal(err)
			}
			_, err := sysfs.New(sysfs.WithRoot(tree.Root)).Discover()
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
