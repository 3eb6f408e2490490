//go:build !race

package nicaffinity

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
)

// TestGangSeesRemovedVictims drives what 1.37's pod-group preemption does:
// the victim is taken out of the snapshot (not out of the apiserver), and
// the group runs PreFilter to Reserve on fresh pod-group cycle states. On a
// half-NIC node whose four aligned GPUs two pods hold (the victim GPUs 0-1,
// a pod that stays GPUs 2-3), the first 2-GPU member fits on the victim's
// GPUs and plans onto them; the second then finds no aligned GPU left, so
// the group does not fit and evicting the victim would not help it. A
// plain pod's cycle frees nothing.
func TestGangSeesRemovedVictims(t *testing.T) {
	pl, st := newTestPlugin(t, nil, handNRT("n", 4, 5, 6, 7))
	c := st.view("n").C
	holding := func(name string, gpus ...int) *v1.Pod {
		p := makePod(name, int64(len(gpus)), nil, rdma, "1")
		p.Spec.NodeName = "n"
		plan := annotations.Allocation{Node: "n"}
		for _, g := range gpus {
			plan.GPUs = append(plan.GPUs, c.GPUs[g].BusID)
		}
		p.Annotations = map[string]string{annotations.AllocationKey: annotations.Marshal(plan)}
		return p
	}
	victim, stays := holding("victim", 0, 1), holding("stays", 2, 3)
	pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{nodeNameIndex: func(obj interface{}) ([]string, error) {
		return []string{obj.(*v1.Pod).Spec.NodeName}, nil
	}})
	for _, p := range []*v1.Pod{victim, stays} {
		if err := pods.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	pl.feed.pods = pods
	snapshot := framework.NewNodeInfo(stays) // the victim taken out
	snapshot.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: v1.NodeStatus{Allocatable: v1.ResourceList{
		"nvidia.com/gpu": *resource.NewQuantity(8, resource.DecimalSI)}}})

	member := func(name string) (fwk.CycleState, *v1.Pod, string) {
		pod := inJob(makePod(name, 2, nil, rdma, "1"), "train")
		cycle := framework.NewCycleState()
		cycle.SetPodGroupSchedulingCycle(framework.NewCycleState())
		if _, st := pl.PreFilter(t.Context(), cycle, pod, []fwk.NodeInfo{snapshot}); !st.IsSuccess() {
			t.Fatalf("PreFilter %s: %v", name, st)
		}
		return cycle, pod, pl.Filter(t.Context(), cycle, pod, snapshot).Message()
	}
	first, firstPod, firstFilter := member("w0")
	if firstFilter != "" {
		t.Fatalf("first member refused where the victim's aligned GPUs would free: %s", firstFilter)
	}
	if st := pl.Reserve(t.Context(), first, firstPod, "n"); !st.IsSuccess() {
		t.Fatal(st)
	}
	s, _ := getState(first)
	if diff := cmp.Diff([]string{c.GPUs[0].BusID, c.GPUs[1].BusID}, s.planned.GPUs); diff != "" {
		t.Errorf("first member's plan (-want,+got):\n%s", diff)
	}
	if _, _, msg := member("w1"); msg == "" {
		t.Error("second member fits: the victim's GPUs were counted for both members")
	}
	pl.Unreserve(t.Context(), first, firstPod, "n")

	plain := makePod("plain", 2, nil, rdma, "1")
	cycle, pst := preFilter(t, pl, plain, snapshot)
	if !pst.IsSuccess() {
		t.Fatal(pst)
	}
	if msg := pl.Filter(t.Context(), cycle, plain, snapshot).Message(); msg == "" {
		t.Error("a plain pod's cycle freed the GPUs of a pod missing from the snapshot")
	}
}
