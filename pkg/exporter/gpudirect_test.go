package exporter

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
	"github.com/nicaffinity/nicaffinity/pkg/topology/sysfs"
)

// TestVerifyGPUDirect: a pod whose GPU sits at PIX from its NIC but with ACS
// redirect between them is observed as not aligned, and says why.
func TestVerifyGPUDirect(t *testing.T) {
	tree := machines.New(t.TempDir())
	machines.HGXH100(tree)
	tree.GPUDirectReady()
	gpus := tree.GPUAddresses()
	port := tree.BridgeAbove(gpus[0])
	tree.ACS(port, topology.ACSRedirectBits)
	if err := tree.Err(); err != nil {
		t.Fatal(err)
	}
	topo, err := sysfs.New(sysfs.WithRoot(tree.Root)).Discover()
	if err != nil {
		t.Fatal(err)
	}
	v := NewVerifier("n1", topo, nrt.DefaultResources(), []string{"rdma/"}, topology.LevelPXB)
	hca := devices.Device{Resource: "rdma/hca", ID: "hca"}
	tests := []struct {
		name string
		pod  PodView
		want annotations.Observed
		msg  string
	}{
		{name: "GPU 0: PIX with ACS redirect", pod: PodView{Devices: []devices.Device{gpu(topo, 0), hca}},
			want: annotations.Observed{GPUs: []annotations.ObservedGPU{{BusID: gpus[0], NIC: "mlx5_0", Level: "PIX"}}, NICs: []string{"mlx5_0"},
				Level: "PIX", GPUDirect: []string{"ACS redirect on " + port}, Plan: "none"},
			msg: "not aligned: GPUDirect RDMA impossible (ACS redirect on " + port + ")"},
		{name: "GPU 0 allowed PHB", pod: PodView{Devices: []devices.Device{gpu(topo, 0), hca}, Annotations: map[string]string{annotations.MaxLevel: "PHB"}},
			want: annotations.Observed{GPUs: []annotations.ObservedGPU{{BusID: gpus[0], NIC: "mlx5_0", Level: "PIX"}}, NICs: []string{"mlx5_0"},
				Level: "PIX", Aligned: true, GPUDirect: []string{"ACS redirect on " + port}, Plan: "none"},
			msg: "within the pod's max level, but GPUDirect RDMA impossible"},
		{name: "GPU 1: clean path", pod: PodView{Devices: []devices.Device{gpu(topo, 1), hca}},
			want: annotations.Observed{GPUs: []annotations.ObservedGPU{{BusID: gpus[1], NIC: "mlx5_1", Level: "PIX"}}, NICs: []string{"mlx5_1"},
				Level: "PIX", Aligned: true, Plan: "none"},
			msg: "GPUDirect RDMA-capable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := v.Verify(tc.pod)
			if !ok {
				t.Fatal("no verdict")
			}
			if diff := cmp.Diff(tc.want, got.Observed); diff != "" {
				t.Errorf("observed (-want,+got):\n%s", diff)
			}
			if !strings.Contains(got.Message(), tc.msg) {
				t.Errorf("message %q, want it to contain %q", got.Message(), tc.msg)
			}
		})
	}
}
