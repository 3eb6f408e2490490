package exporter

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// TestVerifyPieces: what Verify reads of a pod (held), the pool a shared
// RDMA pod reaches, the level it accepts, and what is observed.
func TestVerifyPieces(t *testing.T) {
	_, topo := h20(t)
	v := NewVerifier("n1", topo, nrt.DefaultResources(), []string{"rdma/"}, topology.LevelPXB)
	for _, tc := range []struct {
		name     string
		pod      PodView
		gpus     int
		rdma     bool
		nics     int
		problems string
	}{
		{"GPUs only", PodView{Devices: []devices.Device{gpu(topo, 0), gpu(topo, 1)}}, 2, false, 0, ""},
		{"shared RDMA", PodView{Devices: []devices.Device{gpu(topo, 0), {Resource: "rdma/hca", ID: "hca"}}}, 1, true, 0, ""},
		{"a VF names its PF", PodView{Devices: []devices.Device{gpu(topo, 7), {Resource: "openshift.io/sriov_highnet", ID: "0000:b8:00.2"}}}, 1, true, 1, ""},
		{"an unknown GPU", PodView{Devices: []devices.Device{{Resource: "nvidia.com/gpu", ID: "GPU-ghost"}}}, 0, false, 0, `"GPU-ghost" is no GPU of this node`},
		{"an unknown VF", PodView{Devices: []devices.Device{gpu(topo, 0), {Resource: "openshift.io/sriov_highnet", ID: "0000:ee:00.2"}}}, 1, true, 0, "is no VF of this node"},
		{"DRA claims a GPU and a NIC", PodView{Claimed: []string{topo.GPUs[0].PCI.Address, topo.NICs[0].PCI.Address}}, 1, true, 1, ""},
	} {
		h := v.held(tc.pod)
		if len(h.gpus) != tc.gpus || h.rdma != tc.rdma || len(h.candidates) != tc.nics || !strings.Contains(strings.Join(h.problems, "; "), tc.problems) {
			t.Errorf("%s: %d GPUs, rdma %v, %d NICs, problems %v", tc.name, len(h.gpus), h.rdma, len(h.candidates), h.problems)
		}
	}
	pool := map[int]bool{}
	v.sharedRDMA(pool)
	for i := range pool {
		if topo.NICs[i].PhysFn != "" || !topo.NICs[i].Up() {
			t.Errorf("shared pool holds %s, a VF or a NIC that is down", topo.NICs[i].Name)
		}
	}
	if len(pool) == 0 {
		t.Error("shared pool empty")
	}
	if l, p := v.podMaxLevel(PodView{Annotations: map[string]string{annotations.MaxLevel: "NODE"}}); l != topology.LevelNODE || p != "" {
		t.Errorf("max-level NODE: %v %q", l, p)
	}
	if l, p := v.podMaxLevel(PodView{Annotations: map[string]string{annotations.MaxLevel: "NEAR"}}); l != topology.LevelPXB || !strings.Contains(p, "max-level") {
		t.Errorf("a bad max-level: %v %q, want the default and the problem", l, p)
	}
	// The pod's own NCCL environment wins over its annotation, as the
	// scheduler reads it (pkg/request).
	nccl := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{annotations.MaxLevel: "PIX"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Env: []corev1.EnvVar{{Name: "NCCL_NET_GDR_LEVEL", Value: "SYS"}}}}}}
	if l, p := v.podMaxLevel(PodView{Pod: nccl}); l != topology.LevelSYS || p != "" {
		t.Errorf("NCCL_NET_GDR_LEVEL=SYS over max-level PIX: %v %q, want SYS", l, p)
	}
	o, worst, _ := v.observe(holdings{gpus: []int{0}, candidates: pool, rdma: true})
	if len(o.GPUs) != 1 || o.GPUs[0].NIC == "" || worst > topology.LevelSYS {
		t.Errorf("observe: %+v, worst %v", o, worst)
	}
	if _, worst, _ := v.observe(holdings{gpus: []int{0}, candidates: map[int]bool{}, rdma: true}); worst <= topology.LevelSYS {
		t.Errorf("no candidate NIC: worst %v, want past SYS", worst)
	}
}
