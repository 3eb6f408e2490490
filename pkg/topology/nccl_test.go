package topology

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestNCCLPathRule pins each clause of NCCLPaths on a hand-built host: two
// CPUs, a GPU per kind of attachment, NICs at every distance.
func TestNCCLPathRule(t *testing.T) {
	b := func(addr string, vendor, device uint16) Bridge {
		return Bridge{Address: addr, Vendor: vendor, Device: device}
	}
	topo := &Topology{
		RootComplexes: []RootComplex{
			{ID: "rcA", NUMANode: 0}, {ID: "rcA2", NUMANode: 0}, {ID: "rcB", NUMANode: 1}, {ID: "rcH", NUMANode: 0, Host: "other"},
			{ID: "rcG", NUMANode: 0}, {ID: "rcG2", NUMANode: 1},
		},
		Bridges: []Bridge{
			// A plain two-level switch under rcA: su1 on top, su2 below it.
			b("rp1", 0, 0), b("su1", 0x10b5, 1), b("sd1", 0x10b5, 1), b("sd2", 0x10b5, 1), b("su2", 0x10b5, 1), b("sd3", 0x10b5, 1), b("sd4", 0x10b5, 1),
			// A Broadcom Gen5 switch with a virtual sub-switch under rcA2.
			b("rp2", 0, 0), b("bu1", 0x1000, 0xc030), b("bd1", 0x1000, 0xc030), b("bu2", 0x1000, 0xc030), b("bd2", 0x1000, 0xc030), b("bd3", 0x1000, 0xc030),
			b("rp3", 0, 0), b("rp4", 0, 0), b("rp5", 0, 0), b("rp6", 0, 0), b("rp7", 0, 0), b("rp8", 0, 0),
		},
	}
	fn := func(rc, addr string, chain ...string) PCIFunction {
		return PCIFunction{Address: addr, RootComplex: rc, Bridges: chain, NUMANode: -1}
	}
	rate := func(gbps string) []Port { return []Port{{Number: 1, Rate: gbps + " Gb/sec (4X NDR)"}} }
	topo.GPUs = []GPU{
		{Index: 0, PCI: fn("rcA", "g0", "rp1", "su1", "sd1", "su2", "sd3"), MemoryNUMANode: -1},
		{Index: 1, PCI: fn("rcA2", "g1", "rp2", "bu1", "bd1", "bu2", "bd2"), MemoryNUMANode: -1},
		// A Grace GPU: its own root port, C2C to CPU 0.
		{Index: 2, PCI: fn("rcG", "g2", "rp5"), MemoryNUMANode: 4, C2C: C2CNVML},
		// The same without C2C.
		{Index: 3, PCI: fn("rcG", "g3", "rp8"), MemoryNUMANode: -1},
	}
	topo.NICs = []NIC{
		{Name: "same-switch", PCI: fn("rcA", "n0", "rp1", "su1", "sd1", "su2", "sd4"), Ports: rate("400")},
		{Name: "upper-switch", PCI: fn("rcA", "n1", "rp1", "su1", "sd2"), Ports: rate("400")},
		{Name: "bcm-top", PCI: fn("rcA2", "n2", "rp2", "bu1", "bd3"), Ports: rate("400")},
		{Name: "cpu0-fast", PCI: fn("rcA", "n3", "rp3"), Ports: rate("400")},
		{Name: "cpu0-slow", PCI: fn("rcA", "n4", "rp4"), Ports: rate("200")},
		{Name: "cpu1", PCI: fn("rcB", "n5", "rp6"), Ports: rate("800")},
		{Name: "other-host", PCI: fn("rcH", "n6", "rp7"), Ports: rate("400")},
	}
	if err := topo.Validate(); err != nil {
		t.Fatal(err)
	}
	want := [][]NCCLPath{
		// same-switch upper-switch bcm-top cpu0-fast cpu0-slow cpu1 other-host
		{PathPIX, PathPXB, PathPHB, PathPHB, PathPHB, PathSYS, PathNET},
		// The Broadcom sub-switch is flattened: PIX with the top's NIC.
		{PathPHB, PathPHB, PathPIX, PathPHB, PathPHB, PathSYS, PathNET},
		// C2C, but its closest NIC by NCCL's rule (the fastest first) is
		// the 800 Gb/s one on the other CPU: no NIC of its own CPU is
		// among its closest, so none gets P2C.
		{PathPHB, PathPHB, PathPHB, PathPHB, PathPHB, PathSYS, PathNET},
		{PathPHB, PathPHB, PathPHB, PathPHB, PathPHB, PathSYS, PathNET},
	}
	if diff := cmp.Diff(want, topo.NCCLPaths()); diff != "" {
		t.Errorf("NCCL paths (-want,+got):\n%s", diff)
	}
	// A NIC NCCL found without GPUDirect RDMA support (gdr="0") is eligible
	// on no path, however close.
	topo.NICs[0].GDR = No
	for _, p := range topo.GPUDirectPairs() {
		if p.NIC == "same-switch" && (p.Eligible || p.GPU == 0 && p.NCCLPath != PathPIX) {
			t.Errorf("gdr=0 NIC: %+v", p)
		}
	}
	topo.NICs[0].GDR = ""
	// Without the faster NIC on the other CPU, the Grace GPU's closest NICs
	// are the 400 Gb/s ones of its own CPU, PXB ones included.
	topo.NICs[5].Ports = rate("400")
	got := topo.NCCLPaths()[2]
	if diff := cmp.Diff([]NCCLPath{PathP2C, PathP2C, PathP2C, PathP2C, PathPHB, PathSYS, PathNET}, got); diff != "" {
		t.Errorf("Grace GPU, no faster remote NIC (-want,+got):\n%s", diff)
	}
}

func TestParseNCCLLevel(t *testing.T) {
	tests := []struct {
		in      string
		want    NCCLPath
		wantErr bool
	}{
		{"PIX", PathPIX, false},
		{"P2C", PathP2C, false},
		{"PHB", PathPHB, false},
		{"SYS", PathSYS, false},
		{"LOC", PathLOC, false},
		{"0", PathLOC, false},
		{"1", PathPIX, false},
		{"2", PathPXB, false},
		{"3", PathPHB, false},
		{"4", PathSYS, false},
		{"5", PathSYS, false},
		{"99", PathSYS, false},
		{"3abc", PathPHB, false}, // strtol stops at the first non-digit
		{"99999999999999999999999999", PathSYS, false},
		{"NET", 0, true}, // above SYS: NCCL does not accept it
		{"pix", 0, true}, // NCCL compares exactly
		{"", 0, true},
		{" PIX", 0, true},
		{"-1", 0, true},
	}
	for _, tc := range tests {
		got, err := ParseNCCLLevel(tc.in)
		if (err != nil) != tc.wantErr || (err == nil && got != tc.want) {
			t.Errorf("ParseNCCLLevel(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestNCCLRule(t *testing.T) {
	phb, pxb := PathPHB, PathPXB
	tests := []struct {
		rule NCCLRule
		want NCCLPath
		text string
	}{
		{NCCLRule{}, PathP2C, "NCCL's defaults"},
		{NCCLRule{NoC2C: true}, PathPXB, "NCCL_NET_GDR_C2C=0"},
		{NCCLRule{GDRLevel: &phb}, PathPHB, "NCCL_NET_GDR_LEVEL=PHB"},
		// The level wins over NCCL_NET_GDR_C2C (ncclTopoCheckGdr).
		{NCCLRule{GDRLevel: &phb, NoC2C: true}, PathPHB, "NCCL_NET_GDR_LEVEL=PHB NCCL_NET_GDR_C2C=0"},
		{NCCLRule{GDRLevel: &pxb}, PathPXB, "NCCL_NET_GDR_LEVEL=PXB"},
	}
	for _, tc := range tests {
		if got := tc.rule.Level(); got != tc.want {
			t.Errorf("%s: level %v, want %v", tc.text, got, tc.want)
		}
		if got := tc.rule.String(); got != tc.text {
			t.Errorf("String() = %q, want %q", got, tc.text)
		}
		if !tc.rule.Eligible(tc.want) || tc.rule.Eligible(tc.want+1) {
			t.Errorf("%s: Eligible does not cut at %v", tc.text, tc.want)
		}
	}
}

func TestRateGbps(t *testing.T) {
	for in, want := range map[string]float64{
		"400 Gb/sec (4X NDR)": 400, "200 Gb/sec (2X NDR)": 200, "800 Gb/sec": 800, "56 Gb/sec (4X FDR)": 56,
		"": 0, "fast": 0, "400 MB/sec": 0, "NaN Gb/sec": 0, "1e9 Gb/sec": 0, "-5 Gb/sec": 0,
	} {
		if got := (NIC{Ports: []Port{{Rate: in}}}).RateGbps(); got != want && !(want == 0 && got <= 0) {
			t.Errorf("RateGbps(%q) = %v, want %v", in, got, want)
		}
	}
}
