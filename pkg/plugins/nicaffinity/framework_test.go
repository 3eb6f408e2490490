//go:build !race

// The tests that drive the plugin through the scheduler framework's own
// NodeInfo and CycleState are left out of the -race build: that build would
// compile k8s.io/kubernetes's scheduler framework (215 packages) a second
// time, in race mode, for code whose concurrency is the cache's
// (cache_test.go runs under -race). They all run in the plain go test.

package nicaffinity

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

func nodeInfo(name string, gpus int64) fwk.NodeInfo {
	ni := framework.NewNodeInfo()
	ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: v1.NodeStatus{Allocatable: v1.ResourceList{
		"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI),
	}}})
	return ni
}

// preFilter runs PreFilter on a fresh cycle and returns the cycle.
func preFilter(t testing.TB, pl *NICAffinity, pod *v1.Pod, nodes ...fwk.NodeInfo) (fwk.CycleState, *fwk.Status) {
	t.Helper()
	cycle := framework.NewCycleState()
	_, st := pl.PreFilter(t.Context(), cycle, pod, nodes)
	return cycle, st
}
