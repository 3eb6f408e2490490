package topology

import (
	"encoding/binary"
	"strings"
	"testing"
)

func TestACSFromConfig(t *testing.T) {
	withHeader := func(off int, hdr uint32) []byte {
		b := make([]byte, configSize)
		binary.LittleEndian.PutUint32(b[off:], hdr)
		return b
	}
	loop := withHeader(0x100, 0x0001|0x100<<20)
	misaligned := withHeader(0x100, 0x0001|0x102<<20)
	low := withHeader(0x100, 0x0001|0x40<<20)
	tests := []struct {
		name    string
		config  []byte
		want    string
		wantErr string
	}{
		{name: "redirect on", config: ACSConfig(ACSRedirectBits), want: ACSRedirect},
		{name: "request redirect only", config: ACSConfig(1 << 2), want: ACSRedirect},
		{name: "completion redirect only", config: ACSConfig(1 << 3), want: ACSRedirect},
		{name: "source validation and upstream forwarding, no redirect", config: ACSConfig(0x11), want: ACSOff},
		{name: "unprivileged read: 64 bytes", config: make([]byte, 64), want: Unknown},
		{name: "conventional PCI: 256 bytes", config: make([]byte, 256), want: Unknown},
		{name: "no extended capabilities", config: make([]byte, configSize), want: ACSOff},
		{name: "device gone (all ones)", config: withHeader(0x100, 0xffffffff), want: ACSOff},
		{name: "other capability, end of list", config: withHeader(0x100, 0x0001), want: ACSOff},
		{name: "list loops", config: loop, wantErr: "loops"},
		{name: "next not dword aligned", config: misaligned, wantErr: "not a dword past 0x100"},
		{name: "next inside the legacy space", config: low, wantErr: "not a dword past 0x100"},
		{name: "capability past a short read", config: ACSConfig(0)[:0x149], wantErr: "runs past"},
		{name: "longer than config space", config: make([]byte, configSize+1), wantErr: "at most 4096"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ACSFromConfig(tc.config)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("ACSFromConfig = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func FuzzACSFromConfig(f *testing.F) {
	f.Add(ACSConfig(ACSRedirectBits))
	f.Add(ACSConfig(0)[:0x200])
	f.Add(make([]byte, 64))
	f.Fuzz(func(t *testing.T, config []byte) {
		got, err := ACSFromConfig(config)
		if err == nil && got != ACSRedirect && got != ACSOff && got != Unknown {
			t.Fatalf("state %q", got)
		}
		if len(config) < extCapStart+4 && (got != Unknown || err != nil) {
			t.Fatalf("short config gave %q, %v", got, err)
		}
	})
}

func TestDMABufAndHostBlock(t *testing.T) {
	tests := []struct {
		name      string
		g         GPUDirect
		dmaBuf    string
		why       string
		hostBlock bool
	}{
		{"open module on 6.8", GPUDirect{NVIDIAModule: ModuleOpen, KernelRelease: "6.8.0-45-generic"}, Yes, "", false},
		{"open module on 5.12", GPUDirect{NVIDIAModule: ModuleOpen, KernelRelease: "5.12.0"}, Yes, "", false},
		{"open module on 5.4", GPUDirect{NVIDIAModule: ModuleOpen, KernelRelease: "5.4.0-150-generic", PeerMem: PeerMemAbsent}, No, "older than 5.12", true},
		{"open module, kernel unknown", GPUDirect{NVIDIAModule: ModuleOpen, PeerMem: PeerMemAbsent}, Unknown, "", false},
		{"open module, kernel unreadable", GPUDirect{NVIDIAModule: ModuleOpen, KernelRelease: "banana"}, Unknown, "", false},
		{"proprietary module", GPUDirect{NVIDIAModule: ModuleProp, KernelRelease: "6.8.0", PeerMem: PeerMemAbsent}, No, "proprietary", true},
		{"proprietary module with peermem", GPUDirect{NVIDIAModule: ModuleProp, PeerMem: PeerMemLoaded}, No, "proprietary", false},
		{"no nvidia module", GPUDirect{NVIDIAModule: ModuleAbsent, PeerMem: PeerMemAbsent}, No, "not loaded", true},
		{"nothing known", GPUDirect{}, Unknown, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, why := tc.g.DMABuf()
			if got != tc.dmaBuf || !strings.Contains(why, tc.why) || (tc.why == "" && why != "") {
				t.Errorf("DMABuf = %q, %q; want %q, containing %q", got, why, tc.dmaBuf, tc.why)
			}
			if block := tc.g.HostBlock(); (block != "") != tc.hostBlock {
				t.Errorf("HostBlock = %q, want blocked %v", block, tc.hostBlock)
			}
		})
	}
}

func TestValidateGPUDirectFacts(t *testing.T) {
	base := func() *Topology {
		return &Topology{RootComplexes: []RootComplex{{ID: "pci0000:00"}}, Bridges: []Bridge{{Address: "0000:00:01.0"}},
			NICs: []NIC{{Name: "mlx5_0", PCI: PCIFunction{Address: "0000:01:00.0", RootComplex: "pci0000:00", Bridges: []string{"0000:00:01.0"}}}}}
	}
	tests := []struct {
		name    string
		mutate  func(*Topology)
		wantErr string
	}{
		{"all unknown", func(*Topology) {}, ""},
		{"good facts", func(t *Topology) {
			t.GPUDirect = &GPUDirect{PeerMem: PeerMemLoaded, IOMMU: IOMMUPassthru, NVIDIAModule: ModuleOpen, UVerbs: Yes}
			t.Bridges[0].ACS = ACSOff
			t.NICs[0].UVerbs = "uverbs3"
			t.NICs[0].Ports = []Port{{Number: 1, MTU: 9000, RoCEv2: Yes}}
		}, ""},
		{"bad peermem", func(t *Topology) { t.GPUDirect = &GPUDirect{PeerMem: "maybe"} }, `gpudirect peerMem "maybe"`},
		{"bad iommu", func(t *Topology) { t.GPUDirect = &GPUDirect{IOMMU: "on"} }, `gpudirect iommu "on"`},
		{"bad ACS", func(t *Topology) { t.Bridges[0].ACS = "sometimes" }, `bridge 0000:00:01.0: ACS "sometimes"`},
		{"bad verbs device", func(t *Topology) { t.NICs[0].UVerbs = "../../dev/sda" }, "not uverbs<N>"},
		{"negative MTU", func(t *Topology) { t.NICs[0].Ports = []Port{{Number: 1, MTU: -1}} }, "MTU -1"},
		{"bad RoCE v2 fact", func(t *Topology) { t.NICs[0].Ports = []Port{{Number: 1, RoCEv2: "v2"}} }, `RoCE v2 "v2"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			topo := base()
			tc.mutate(topo)
			err := topo.Validate()
			if (err == nil) != (tc.wantErr == "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Validate = %v, want error containing %q", err, tc.wantErr)
			}
		})
	}
}
