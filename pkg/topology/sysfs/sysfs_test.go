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

// small builds a host with one GPU and one SR-IOV NIC (two VFs, one of them an
// RDMA device) behind one switch.
func small(t testing.TB) *machines.Tree {
	t.Helper()
	tree := machines.New(t.TempDir())
	tree.NUMANode(0, "0-7")
	tree.GPU("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0", 0, "0-7")
	pf := "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0"
	tree.NIC(pf, "mlx5_0", 0, machines.ActiveRoCE)
	vf1 := "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.2"
	vf2 := "pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.3"
	tree.PCI(vf1, machines.Func{Vendor: machines.VendorMellanox, Device: 0x101e, Class: machines.ClassEther})
	tree.PCI(vf2, machines.Func{Vendor: machines.VendorMellanox, Device: 0x101e, Class: machines.ClassEther})
	tree.RDMA(vf1, "mlx5_2", "", machines.Port{LinkLayer: "Ethernet", State: "1: DOWN", Rate: "10 Gb/sec (1X QDR)"})
	tree.SRIOV(pf, 8, vf1, vf2)
	if err := tree.Err(); err != nil {
		t.Fatal(err)
	}
	return tree
}

func TestReadSmallHost(t *testing.T) {
	tree := small(t)
	topo, err := sysfs.New(sysfs.WithRoot(tree.Root)).Discover()
	if err != nil {
		t.Fatal(err)
	}
	want := []topology.NIC{
		{
			Name: "mlx5_0", Netdevs: []string{"net-mlx5_0"},
			Ports:    []topology.Port{{Number: 1, LinkLayer: "Ethernet", State: "ACTIVE", Rate: "200 Gb/sec (4X HDR)"}},
			TotalVFs: 8, VFs: []string{"0000:04:00.2", "0000:04:00.3"},
		},
		{
			Name:   "mlx5_2",
			Ports:  []topology.Port{{Number: 1, LinkLayer: "Ethernet", State: "DOWN", Rate: "10 Gb/sec (1X QDR)"}},
			PhysFn: "0000:04:00.0",
		},
	}
	if diff := cmp.Diff(want, topo.NICs, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".PCI" }, cmp.Ignore())); diff != "" {
		t.Errorf("NICs (-want,+got):\n%s", diff)
	}
	if topo.NICs[1].Up() {
		t.Error("a DOWN port reads as up")
	}
	m := topo.Matrix()
	if got := m.Cells[0][1].String() + " " + m.Cells[0][2].String(); got != "PIX PIX" {
		t.Errorf("GPU0-PF, GPU0-VF = %s, want PIX PIX", got)
	}
	if diff := cmp.Diff([]topology.NUMANode{{ID: 0, CPUs: "0-7"}}, topo.NUMANodes); diff != "" {
		t.Errorf("NUMA (-want,+got):\n%s", diff)
	}
}

func TestReadNUMAMemory(t *testing.T) {
	tree := small(t)
	tree.NUMAMemory(0, 263921836, map[int64]int64{2048: 512, 1048576: 4})
	topo, err := sysfs.New(sysfs.WithRoot(tree.Root)).Discover()
	if err != nil {
		t.Fatal(err)
	}
	want := []topology.NUMANode{{
		ID: 0, CPUs: "0-7", MemoryBytes: 263921836 * 1024,
		HugePages: []topology.HugePages{{PageBytes: 2 << 20, Count: 512}, {PageBytes: 1 << 30, Count: 4}},
	}}
	if diff := cmp.Diff(want, topo.NUMANodes); diff != "" {
		t.Errorf("NUMA (-want,+got):\n%s", diff)
	}
}

func TestReadBadInput(t *testing.T) {
	gpu := "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0"
	tests := []struct {
		name    string
		mutate  func(t *testing.T, tree *machines.Tree)
		wantErr string
	}{
		{"missing class file", func(t *testing.T, tree *machines.Tree) {
			mustRemove(t, filepath.Join(tree.Root, gpu, "class"))
		}, "PCI device 0000:03:00.0: reading "},
		{"garbage class", func(t *testing.T, tree *machines.Tree) {
			tree.WriteFile(gpu+"/class", "display thing")
		}, `class: "display thing" is not a 24-bit hex number`},
		{"class too wide", func(t *testing.T, tree *machines.Tree) {
			tree.WriteFile(gpu+"/class", "0x1030200")
		}, `"0x1030200" is not a 24-bit hex number`},
		{"garbage numa_node", func(t *testing.T, tree *machines.Tree) {
			tree.WriteFile(gpu+"/numa_node", "two")
		}, `numa_node: "two" is not a NUMA node number`},
		{"device on two NUMA nodes", func(t *testing.T, tree *machines.Tree) {
			tree.WriteFile(gpu+"/numa_node", "1")
		}, "cannot sit on two NUMA nodes"},
		{"dangling device link", func(t *testing.T, tree *machines.Tree) {
			tree.Symlink("bus/pci/devices/0000:09:00.0", "devices/pci0000:00/0000:09:00.0")
		}, "PCI device 0000:09:00.0: resolving"},
		{"looping device link", func(t *testing.T, tree *machines.Tree) {
			tree.Symlink("bus/pci/devices/0000:09:00.0", "bus/pci/devices/0000:09:00.0")
		}, "PCI device 0000:09:00.0: resolving"},
		{"link out of the root", func(t *testing.T, tree *machines.Tree) {
			outside := t.TempDir()
			mustSymlink(t, outside, filepath.Join(tree.Root, "bus/pci/devices/0000:09:00.0"))
		}, "outside the sysfs root"},
		{"garbage device name", func(t *testing.T, tree *machines.Tree) {
			tree.Symlink("bus/pci/devices/not-a-device", gpu)
		}, `PCI device not-a-device: PCI address "not-a-device"`},
		{"dangling RDMA device link", func(t *testing.T, tree *machines.Tree) {
			tree.Symlink("devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0/infiniband/mlx5_0/device", "devices/gone")
		}, "RDMA device mlx5_0: resolving"},
		{"garbage port directory", func(t *testing.T, tree *machines.Tree) {
			tree.WriteFile("devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0/infiniband/mlx5_0/ports/one/state", "4: ACTIVE")
		}, "RDMA device mlx5_0: port directory"},
		{"garbage VF count", func(t *testing.T, tree *machines.Tree) {
			tree.WriteFile("devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0/sriov_totalvfs", "-3")
		}, `sriov_totalvfs: "-3" is not a VF count`},
		{"class is a FIFO (would block a plain read)", func(t *testing.T, tree *machines.Tree) {
			mustRemove(t, filepath.Join(tree.Root, gpu, "class"))
			if err := syscall.Mkfifo(filepath.Join(tree.Root, gpu, "class"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "class: not a regular file"},
		{"class links to /dev/zero (endless)", func(t *testing.T, tree *machines.Tree) {
			mustRemove(t, filepath.Join(tree.Root, gpu, "class"))
			mustSymlink(t, "/dev/zero", filepath.Join(tree.Root, gpu, "class"))
		}, "class: not a regular file"},
		{"class larger than a page", func(t *testing.T, tree *machines.Tree) {
			tree.WriteFile(gpu+"/class", "0x030200"+strings.Repeat(" ", 5000))
		}, "class: longer than 4096 bytes"},
		{"meminfo without MemTotal", func(t *testing.T, tree *machines.Tree) {
			tree.WriteFile("devices/system/node/node0/meminfo", "Node 0 MemFree: 12 kB\n")
		}, `meminfo: no line "Node N MemTotal: <size> kB"`},
		{"meminfo with a garbage MemTotal", func(t *testing.T, tree *machines.Tree) {
			tree.WriteFile("devices/system/node/node0/meminfo", "Node 0 MemTotal: 99999999999999999999 kB\n")
		}, `MemTotal "99999999999999999999" is not a size in kB`},
		{"huge page count that overflows bytes", func(t *testing.T, tree *machines.Tree) {
			tree.WriteFile("devices/system/node/node0/hugepages/hugepages-1048576kB/nr_hugepages", "9223372036854775807")
		}, `nr_hugepages: "9223372036854775807" is not a page count`},
		{"garbage huge page size", func(t *testing.T, tree *machines.Tree) {
			tree.WriteFile("devices/system/node/node0/hugepages/hugepages-twokB/nr_hugepages", "1")
		}, "hugepages-twokB: not hugepages-<size>kB"},
		{"missing sysfs root", func(t *testing.T, tree *machines.Tree) {
			mustRemove(t, tree.Root)
		}, "sysfs root"},
		{"garbage numa_status node", func(t *testing.T, tree *machines.Tree) {
			tree.WriteFile(machines.NVIDIAProcDir+"/gpus/0000:03:00.0/numa_status", "Node:      two\nStatus:    online\n")
		}, `numa_status: Node "two" is not a NUMA node number`},
		{"numa_status without a node", func(t *testing.T, tree *machines.Tree) {
			tree.WriteFile(machines.NVIDIAProcDir+"/gpus/0000:03:00.0/numa_status", "Status:    online\n")
		}, "numa_status: no Node line"},
		{"numa_status past its size cap", func(t *testing.T, tree *machines.Tree) {
			tree.WriteFile(machines.NVIDIAProcDir+"/gpus/0000:03:00.0/numa_status", strings.Repeat("x", 8192))
		}, "numa_status"},
		{"numa_status node out of range", func(t *testing.T, tree *machines.Tree) {
			tree.WriteFile(machines.NVIDIAProcDir+"/gpus/0000:03:00.0/numa_status", "Node: 99999999\n")
		}, `Node "99999999" is not a NUMA node number`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tree := small(t)
			tc.mutate(t, tree)
			if err := tree.Err(); err != nil {
				t.Fatal(err)
			}
			_, err := tree.Reader().Discover()
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func mustRemove(t *testing.T, path string) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// TestRealVMs reads snapshots of real H200 VMs' sysfs (taken with
// scripts/snapshot-sysfs.sh on the device machines) and compares with the
// `nvidia-smi topo -m` each printed. Their PCIe trees are flat (GPUs on the
// root bus), numa_node is -1, and there is no RDMA device: nothing may be
// invented. The two-GPU VM's NV18 comes through NVML, played by a mock with
// its bus IDs and 18 links per GPU into NVSwitches (what its `nvidia-smi
// nvlink -s` showed).
func TestRealVMs(t *testing.T) {
	for _, vm := range []struct {
		dir     string
		nvlinks int
	}{{"h200-vm", 0}, {"h200x2-vm", 18}} {
		t.Run(vm.dir, func(t *testing.T) {
			dir := filepath.Join("..", "testdata", vm.dir)
			want := publishedMatrix(t, filepath.Join("..", vm.dir, "nvidia-smi-topo.txt"))
			host, err := sysfs.New(sysfs.WithRoot(filepath.Join(dir, "snap"))).Read()
			if err != nil {
				t.Fatal(err)
			}
			if vm.nvlinks > 0 {
				host = withMockNVML(t, host, vm.nvlinks)
			}
			topo, err := topology.FromHostData(host)
			if err != nil {
				t.Fatal(err)
			}
			if len(topo.NICs) != 0 || len(topo.Bridges) != 0 {
				t.Errorf("invented devices: NICs %v, bridges %v", topo.NICs, topo.Bridges)
			}
			got := topo.Matrix()
			if diff := cmp.Diff(cells(want, false), cells(got, false)); diff != "" {
				t.Errorf("matrix (-want,+got):\n%s", diff)
			}
			if diff := cmp.Diff(affinity(want), affinity(got)); diff != "" {
				t.Errorf("affinity (-want,+got):\n%s", diff)
			}
		})
	}
}

// FuzzReadAttributes writes arbitrary contents into the attribute files the
// reader parses and reads the tree: errors are fine, panics are not.
func FuzzReadAttributes(f *testing.F) {
	f.Add("0x030200", "0", "8", "4: ACTIVE", "0x10de")
	f.Add("", "-1", "", ":", "")
	f.Add("0xffffffffffffffff", "99999999999999999999", "x", "\x00", "0x")
	// One tree per fuzzing process; every run overwrites the same files.
	tree := small(f)
	f.Fuzz(func(t *testing.T, class, numa, totalVFs, state, vendor string) {
		gpu := "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0"
		pf := "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0"
		tree.WriteFile(gpu+"/class", class)
		tree.WriteFile(gpu+"/numa_node", numa)
		tree.WriteFile(gpu+"/vendor", vendor)
		tree.WriteFile(pf+"/sriov_totalvfs", totalVFs)
		tree.WriteFile(pf+"/infiniband/mlx5_0/ports/1/state", state)
		if tree.Err() != nil {
			return
		}
		topo, err := sysfs.New(sysfs.WithRoot(tree.Root)).Discover()
		if err == nil {
			_ = topo.Matrix()
		}
	})
}

// TestReadNUMAStatus reads a coherent GPU's memory node from the driver's
// procfs, and only from the directory the Reader is given.
func TestReadNUMAStatus(t *testing.T) {
	tests := []struct {
		name     string
		status   string
		wantNode int
		wantC2C  string
	}{
		{"online", "Node:      2\nStatus:    online\nAddress:   4000000000\n", 2, topology.C2CNUMAStatus},
		{"offline still names the node", "Node:      10\nStatus:    offline\n", 10, topology.C2CNUMAStatus},
		{"node -1 is none", "Node:      -1\nStatus:    disabled\n", -1, ""},
		{"no file", "", -1, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tree := small(t)
			if tc.status != "" {
				tree.WriteFile(machines.NVIDIAProcDir+"/gpus/0000:03:00.0/numa_status", tc.status)
			}
			topo, err := tree.Reader().Discover()
			if err != nil {
				t.Fatal(err)
			}
			if g := topo.GPUs[0]; g.MemoryNUMANode != tc.wantNode || g.C2C != tc.wantC2C {
				t.Errorf("memory NUMA node %d, C2C %q; want %d, %q", g.MemoryNUMANode, g.C2C, tc.wantNode, tc.wantC2C)
			}
			// A Reader of a tree without WithNVIDIAProc reads no procfs.
			plain, err := sysfs.New(sysfs.WithRoot(tree.Root)).Discover()
			if err != nil {
				t.Fatal(err)
			}
			if g := plain.GPUs[0]; g.MemoryNUMANode != -1 || g.C2C != "" {
				t.Errorf("without WithNVIDIAProc: memory NUMA node %d, C2C %q", g.MemoryNUMANode, g.C2C)
			}
		})
	}
}
