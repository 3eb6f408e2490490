package nvmlgpu_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/go-cmp/cmp"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
	"github.com/nicaffinity/nicaffinity/pkg/topology/nvmlgpu"
	"github.com/nicaffinity/nicaffinity/pkg/topology/nvmlgpu/nvmltest"
)

func busIDs(n int) []string {
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, fmt.Sprintf("00000000:%02X:00.0", 0x18+0x10*i))
	}
	return out
}

func TestReadDGXMocks(t *testing.T) {
	tests := []struct {
		name  string
		srv   *server.Server
		links int
	}{
		{"dgxa100", dgxa100.New(), 12},
		{"dgxh100", dgxh100.New(), 18},
		{"dgxh200", dgxh200.New(), 18},
		{"dgxb200", dgxb200.New(), 18},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ids := busIDs(8)
			if err := nvmltest.WithNVSwitches(tc.srv, ids, tc.links); err != nil {
				t.Fatal(err)
			}
			data, err := nvmlgpu.New(nvmlgpu.WithNVML(tc.srv)).Read()
			if err != nil {
				t.Fatal(err)
			}
			var want []topology.NVMLGPU
			for i, d := range tc.srv.Devices {
				dev := d.(*server.Device)
				norm, _ := topology.NormalizeBusID(ids[i])
				want = append(want, topology.NVMLGPU{Index: i, UUID: dev.UUID, Name: dev.Config.Name, BusID: norm, MemoryNUMANode: -1})
			}
			if diff := cmp.Diff(want, data.GPUs); diff != "" {
				t.Errorf("GPUs (-want,+got):\n%s", diff)
			}
			if len(data.NVLinks) != 28 {
				t.Fatalf("got %d NVLink pairs, want 28 (every pair of 8 GPUs)", len(data.NVLinks))
			}
			for _, l := range data.NVLinks {
				if l.Count != tc.links {
					t.Errorf("GPU%d-GPU%d: NV%d, want NV%d", l.GPU, l.Peer, l.Count, tc.links)
				}
			}
		})
	}
}

// TestReadDirectNVLinks is two PCIe GPUs joined by an NVLink bridge: links
// straight to the peer, no switch.
func TestReadDirectNVLinks(t *testing.T) {
	srv := dgxa100.New()
	ids := busIDs(2)
	if err := nvmltest.WithNVSwitches(srv, ids, 0); err != nil {
		t.Fatal(err)
	}
	for i := range srv.Devices {
		dev := srv.Devices[i].(*server.Device)
		peer := ids[1-i]
		dev.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
			switch {
			case link >= 12:
				return 0, nvml.ERROR_INVALID_ARGUMENT
			case link < 4:
				return nvml.FEATURE_ENABLED, nvml.SUCCESS
			}
			return nvml.FEATURE_DISABLED, nvml.SUCCESS
		}
		dev.GetNvLinkRemotePciInfoFunc = func(int) (nvml.PciInfo, nvml.Return) { return nvmltest.PciInfo(peer), nvml.SUCCESS }
	}
	data, err := nvmlgpu.New(nvmlgpu.WithNVML(srv)).Read()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]topology.NVLink{{GPU: 0, Peer: 1, Count: 4}}, data.NVLinks); diff != "" {
		t.Errorf("NVLinks (-want,+got):\n%s", diff)
	}
}

func TestReadFaults(t *testing.T) {
	tests := []struct {
		name    string
		break_  func(s *server.Server)
		wantErr string
		is      error
	}{
		{"no driver", func(s *server.Server) {
			s.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
			s.ErrorStringFunc = func(r nvml.Return) string { return "ERROR_LIBRARY_NOT_FOUND" }
		}, "NVML unavailable", nvmlgpu.ErrUnavailable},
		{"count fails", func(s *server.Server) {
			s.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
		}, "nvmlDeviceGetCount", nil},
		{"empty bus ID", func(s *server.Server) {
			s.Devices[3].(*server.Device).GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{}, nvml.SUCCESS }
		}, "GPU 3 (GPU-", nil},
		{"fallen off the bus", func(s *server.Server) {
			s.Devices[5].(*server.Device).GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }
		}, "GPU 5: nvmlDeviceGetUUID", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := dgxh100.New()
			if err := nvmltest.WithNVSwitches(srv, busIDs(8), 18); err != nil {
				t.Fatal(err)
			}
			srv.ErrorStringFunc = func(r nvml.Return) string { return fmt.Sprintf("return %d", r) }
			tc.break_(srv)
			_, err := nvmlgpu.New(nvmlgpu.WithNVML(srv)).Read()
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
		})
	}
}

// TestReadC2C reads C2C the way NCCL does: a link count, then each link's
// status; a GPU whose links are all down, or whose driver does not know
// the fields, has none.
func TestReadC2C(t *testing.T) {
	tests := []struct {
		name  string
		links int
		down  bool
		want  bool
	}{
		{"PCIe GPU", 0, false, false},
		{"GB200, 5 links", 5, false, true},
		{"links all down", 3, true, false},
		{"absurd count", 1 << 30, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := dgxh100.New()
			if err := nvmltest.WithNVSwitches(srv, busIDs(2), 18); err != nil {
				t.Fatal(err)
			}
			dev := srv.Devices[1].(*server.Device)
			nvmltest.SetC2CLinks(dev, tc.links)
			if tc.down {
				inner := dev.GetFieldValuesFunc
				dev.GetFieldValuesFunc = func(v []nvml.FieldValue) nvml.Return {
					r := inner(v)
					for i := range v {
						if v[i].FieldId == nvml.FI_DEV_C2C_LINK_GET_STATUS {
							v[i].Value = [8]byte{0}
						}
					}
					return r
				}
			}
			data, err := nvmlgpu.New(nvmlgpu.WithNVML(srv)).Read()
			if err != nil {
				t.Fatal(err)
			}
			if data.GPUs[0].C2C || data.GPUs[1].C2C != tc.want {
				t.Errorf("C2C = %v, %v; want false, %v", data.GPUs[0].C2C, data.GPUs[1].C2C, tc.want)
			}
		})
	}
}

// TestReadNVLinkDomain: a GPU registered with a multi-node NVLink fabric
// (an NVL72 rack) names its cluster and clique; one outside a fabric, or
// not yet registered, names none.
func TestReadNVLinkDomain(t *testing.T) {
	cluster := [16]uint8{0x9f, 0x1c, 0x2a, 0x3b, 0x4c, 0x5d, 0x6e, 0x7f, 0x80, 0x91, 0xa2, 0xb3, 0xc4, 0xd5, 0xe6, 0xf7}
	srv := dgxh100.New()
	if err := nvmltest.WithNVSwitches(srv, busIDs(3), 18); err != nil {
		t.Fatal(err)
	}
	nvmltest.SetFabric(srv.Devices[0].(*server.Device), cluster, 7)
	pending := srv.Devices[2].(*server.Device)
	pending.GetGpuFabricInfoFunc = func() (nvml.GpuFabricInfo, nvml.Return) {
		return nvml.GpuFabricInfo{ClusterUuid: cluster, State: nvml.GPU_FABRIC_STATE_IN_PROGRESS, Status: uint32(nvml.SUCCESS)}, nvml.SUCCESS
	}
	data, err := nvmlgpu.New(nvmlgpu.WithNVML(srv)).Read()
	if err != nil {
		t.Fatal(err)
	}
	got := []string{data.GPUs[0].NVLinkDomain, data.GPUs[1].NVLinkDomain, data.GPUs[2].NVLinkDomain}
	if diff := cmp.Diff([]string{"9f1c2a3b-4c5d-6e7f-8091-a2b3c4d5e6f7/7", "", ""}, got); diff != "" {
		t.Errorf("NVLink domains (-want,+got):\n%s", diff)
	}
}
