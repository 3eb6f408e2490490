//go:build !race

package nicaffinity

import (
	"strings"
	"testing"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	v1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	podrequest "github.com/nicaffinity/nicaffinity/pkg/request"
)

// schema1 is obj as an exporter of schema 1 would publish it: no ncclPath.
func schema1(obj *v1alpha2.NodeResourceTopology) *v1alpha2.NodeResourceTopology {
	obj = obj.DeepCopy()
	for i := range obj.Zones {
		z := &obj.Zones[i]
		var keep v1alpha2.AttributeList
		for _, a := range z.Attributes {
			if a.Name != nrt.AttrNCCLPath {
				keep = append(keep, a)
			}
		}
		z.Attributes = keep
	}
	for i, a := range obj.Attributes {
		if a.Name == nrt.AttrSchema {
			obj.Attributes[i].Value = "1"
		}
	}
	return obj
}

// TestFilterNCCLRule: "aligned" is NCCL's rule. On a GB200 tray every GPU
// reaches its Grace's fast NICs at P2C, which the default accepts; a pod
// that turns NCCL's C2C rule off, or asks for PXB, is kept off them and
// told why; a schema 1 object (an older exporter) has no P2C pairs; and a
// pod whose own NCCL accepts PHB is placed at PHB.
func TestFilterNCCLRule(t *testing.T) {
	gb200 := machineNRT(t, "gb200", machines.GB200Tray)
	// Half-NIC node with only the NIC-less switches' GPUs free (0-3: PHB).
	half := machineNRT(t, "half", machines.HalfNICs, 4, 5, 6, 7)
	tests := []struct {
		name     string
		obj      *v1alpha2.NodeResourceTopology
		pod      *v1.Pod
		wantCode fwk.Code
		wantMsg  string
	}{
		{name: "GB200, 1 GPU", obj: gb200, pod: makePod("p", 1, nil, rdma, "1")},
		{name: "GB200, 2 GPUs", obj: gb200, pod: makePod("p", 2, nil, rdma, "1")},
		{name: "GB200, the whole tray", obj: gb200, pod: makePod("p", 4, nil, rdma, "1")},
		{name: "GB200, NCCL_NET_GDR_C2C=0", obj: gb200, pod: withEnv(makePod("p", 1, nil, rdma, "1"), podrequest.EnvGDRC2C, "0"),
			wantCode: fwk.UnschedulableAndUnresolvable, wantMsg: "none of the 4 free GPUs has a NIC at PXB or closer (the pod's NCCL_NET_GDR_C2C=0)"},
		{name: "GB200, max-level PXB", obj: gb200, pod: makePod("p", 1, map[string]string{annotations.MaxLevel: "PXB"}, rdma, "1"),
			wantCode: fwk.UnschedulableAndUnresolvable, wantMsg: "none of the 4 free GPUs has a NIC at PXB or closer"},
		{name: "GB200, NCCL_NET_GDR_LEVEL=P2C", obj: gb200, pod: withEnv(makePod("p", 4, nil, rdma, "1"), podrequest.EnvGDRLevel, "P2C")},
		{name: "GB200 from a schema 1 exporter", obj: schema1(gb200), pod: makePod("p", 1, nil, rdma, "1"),
			wantCode: fwk.UnschedulableAndUnresolvable, wantMsg: "none of the 4 free GPUs has a NIC at PXB or closer"},
		{name: "half-NIC, PHB GPUs only, default", obj: half, pod: makePod("p", 1, nil, rdma, "1"),
			wantCode: fwk.Unschedulable, wantMsg: "none of the 4 free GPUs has a NIC at PXB or closer"},
		{name: "half-NIC, PHB GPUs only, NCCL_NET_GDR_LEVEL=PHB", obj: half, pod: withEnv(makePod("p", 1, nil, rdma, "1"), podrequest.EnvGDRLevel, "PHB")},
		{name: "half-NIC, NCCL_NET_GDR_LEVEL=3 (old PHB)", obj: half, pod: withEnv(makePod("p", 1, nil, rdma, "1"), podrequest.EnvGDRLevel, "3")},
		{name: "half-NIC, NCCL_NET_GDR_LEVEL=PIX", obj: half, pod: withEnv(makePod("p", 1, nil, rdma, "1"), podrequest.EnvGDRLevel, "PIX"),
			wantCode: fwk.Unschedulable, wantMsg: "none of the 4 free GPUs has a NIC at PIX or closer (the pod's NCCL_NET_GDR_LEVEL=PIX)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pl, _ := newTestPlugin(t, nil, tc.obj)
			cycle, st := preFilter(t, pl, tc.pod, nodeInfo("big", 16))
			if !st.IsSuccess() {
				t.Fatalf("PreFilter: %v", st)
			}
			got := pl.Filter(t.Context(), cycle, nil, nodeInfo(tc.obj.Name, 8))
			if got.Code() != tc.wantCode || !strings.Contains(got.Message(), tc.wantMsg) {
				t.Errorf("Filter = %v %q, want %v containing %q", got.Code(), got.Message(), tc.wantCode, tc.wantMsg)
			}
		})
	}
}
