package topology

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// host is a small valid host: one GPU and one NIC behind a switch.
func host() HostData {
	return HostData{
		PCI: []PCIRecord{
			{Address: "0000:00:01.0", Path: "devices/pci0000:00/0000:00:01.0", Vendor: 0x8086, Class: 0x060400, NUMANode: 0},
			{Address: "0000:01:00.0", Path: "devices/pci0000:00/0000:00:01.0/0000:01:00.0", Vendor: 0x10b5, Class: 0x060400, NUMANode: 0},
			{Address: "0000:02:00.0", Path: "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0", Vendor: 0x10b5, Class: 0x060400, NUMANode: 0},
			{Address: "0000:02:01.0", Path: "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0", Vendor: 0x10b5, Class: 0x060400, NUMANode: 0},
			{Address: "0000:03:00.0", Path: "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0", Vendor: 0x10de, Class: 0x030200, NUMANode: 0, LocalCPUs: "0-7"},
			{Address: "0000:04:00.0", Path: "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0", Vendor: 0x15b3, Class: 0x020700, NUMANode: 0},
		},
		RDMA: []RDMARecord{{Name: "mlx5_0", PCIAddress: "0000:04:00.0", Ports: []Port{{Number: 1, LinkLayer: "InfiniBand", State: "ACTIVE"}}}},
	}
}

func TestFromHostData(t *testing.T) {
	topo, err := FromHostData(host())
	if err != nil {
		t.Fatal(err)
	}
	m := topo.Matrix()
	got := [][]string{}
	for _, row := range m.Cells {
		var r []string
		for _, c := range row {
			r = append(r, c.String())
		}
		got = append(got, r)
	}
	want := [][]string{{"X", "PIX"}, {"PIX", "X"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("matrix (-want,+got):\n%s", diff)
	}
	if topo.GPUs[0].CPUAffinity != "0-7" || !topo.NICs[0].Up() {
		t.Errorf("GPU affinity %q, NIC up %v", topo.GPUs[0].CPUAffinity, topo.NICs[0].Up())
	}
}

func TestFromHostDataBadInput(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(h *HostData)
		wantErr string
	}{
		{"garbage address", func(h *HostData) { h.PCI[4].Address = "zz:00.0" }, `PCI device "zz:00.0"`},
		{"listed twice", func(h *HostData) { h.PCI = append(h.PCI, h.PCI[4]) }, "0000:03:00.0 listed twice"},
		{"path without a host bridge", func(h *HostData) { h.PCI[4].Path = "devices/platform/0000:03:00.0" }, "0000:03:00.0: path \"devices/platform/0000:03:00.0\" has no host bridge"},
		{"path ending elsewhere", func(h *HostData) { h.PCI[4].Path = "devices/pci0000:00/0000:00:01.0" }, "does not end at the device"},
		{"garbage on the path", func(h *HostData) {
			h.PCI[4].Path = "devices/pci0000:00/0000:00:01.0/usb1/0000:03:00.0"
		}, `has "usb1" where a bridge address belongs`},
		{"bridge that is not a device", func(h *HostData) { h.PCI = append(h.PCI[:3], h.PCI[4:]...) }, "bridge 0000:02:01.0 on its path is not a PCI device"},
		{"device on two NUMA nodes", func(h *HostData) { h.PCI[5].NUMANode = 1 }, "a host bridge cannot sit on two NUMA nodes"},
		{"RDMA device on an unknown function", func(h *HostData) { h.RDMA[0].PCIAddress = "0000:09:00.0" }, "RDMA device mlx5_0: its PCI device 0000:09:00.0 is not a PCI device of this host"},
		{"RDMA device with a bad address", func(h *HostData) { h.RDMA[0].PCIAddress = "nope" }, "RDMA device mlx5_0"},
		{"RDMA device listed twice", func(h *HostData) { h.RDMA = append(h.RDMA, h.RDMA[0]) }, "RDMA device mlx5_0 listed twice"},
		{"NVML GPU missing from sysfs", func(h *HostData) {
			h.NVML = &NVMLData{GPUs: []NVMLGPU{{Index: 0, UUID: "GPU-x", BusID: "00000000:0A:00.0"}}}
		}, "NVML GPU 0 (GPU-x) at 0000:0a:00.0: sysfs has no such PCI device"},
		{"NVML link to a missing GPU", func(h *HostData) {
			h.NVML = &NVMLData{GPUs: []NVMLGPU{{Index: 0, BusID: "0000:03:00.0"}}, NVLinks: []NVLink{{GPU: 0, Peer: 3, Count: 4}}}
		}, "NVLink between GPU 0 and GPU 3 names a GPU that is not there"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := host()
			tc.mutate(&h)
			_, err := FromHostData(h)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// FuzzFromHostData feeds arbitrary paths, addresses and NUMA nodes: errors
// are fine, panics are not, and whatever is accepted yields a square matrix.
func FuzzFromHostData(f *testing.F) {
	f.Add("0000:03:00.0", "devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0", 0, "0000:04:00.0")
	f.Add("3:0.0", "pci0000:00//0000:03:00.0", -1, "")
	f.Add("ffffffff:ff:1f.7", "x/pciffffffff:ff/ffffffff:ff:1f.7", 7, "ffffffff:ff:1f.7")
	f.Fuzz(func(t *testing.T, addr, path string, numa int, rdma string) {
		h := host()
		h.PCI[4].Address, h.PCI[4].Path, h.PCI[4].NUMANode = addr, path, numa
		h.RDMA[0].PCIAddress = rdma
		topo, err := FromHostData(h)
		if err != nil {
			return
		}
		m := topo.Matrix()
		if len(m.Cells) != len(topo.GPUs)+len(topo.NICs) {
			t.Fatalf("matrix has %d rows for %d devices", len(m.Cells), len(topo.GPUs)+len(topo.NICs))
		}
	})
}
