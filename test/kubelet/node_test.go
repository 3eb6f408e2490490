//go:build kubelet

package kubelet

import (
	"context"
	"slices"
	"testing"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nicaffinity/nicaffinity/internal/realkubelet"
	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
)

// zoneFigures sums a resource over the object's NUMA zones.
func zoneFigures(o *v1alpha2.NodeResourceTopology, res string) (allocatable, available int64) {
	for _, z := range o.Zones {
		if z.Type != nrt.ZoneNode {
			continue
		}
		for _, r := range z.Resources {
			if r.Name == res {
				allocatable += r.Allocatable.Value()
				available += r.Available.Value()
			}
		}
	}
	return allocatable, available
}

// guaranteed submits a Guaranteed pod (whole CPUs, memory) on node: the
// CPU manager's static policy gives it exclusive CPUs.
func (e *env) guaranteed(t *testing.T, name, node string, gpus int64) {
	t.Helper()
	res := corev1.ResourceList{gpuRes: *resource.NewQuantity(gpus, resource.DecimalSI), rdmaRes: resource.MustParse("1"),
		corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("64Mi")}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{SchedulerName: sched, NodeSelector: map[string]string{"kubernetes.io/hostname": node},
			Containers: []corev1.Container{{Name: "train", Image: "train", Resources: corev1.ResourceRequirements{Limits: res, Requests: res}}}}}
	if _, err := e.cp.Kube.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestRealKubeletExporter: against the kubelet's own podresources server,
// the exporter's object carries the kubelet's pod fingerprint, its NUMA
// zones' free devices are what the kubelet offers less what its pods
// hold, and each pod's observation names the GPUs the kubelet lists for
// it. On the node with the CPU manager's static policy, the exclusive
// CPUs too.
func TestRealKubeletExporter(t *testing.T) {
	static := func(o *realkubelet.Options) { o.CPUManagerPolicy = "static" }
	e := startEnv(t, nodeSpec{name: "plain", machine: machines.HalfNICs}, nodeSpec{name: "static", machine: machines.HalfNICs, opts: static})
	for _, node := range []string{"plain", "static"} {
		e.guaranteed(t, "job-"+node, node, 2)
	}
	for _, node := range []string{"plain", "static"} {
		name := "job-" + node
		e.waitPhase(t, name, corev1.PodRunning)
		n := e.nodes[node]
		obj := e.waitSynced(t, n)
		snap := n.snapshot()
		if got, want := nrt.AttrValue(obj.Attributes, "nodeTopologyPodsFingerprint"), nrt.Fingerprint(snap.Pods); got != want {
			t.Errorf("%s: fingerprint %s, kubelet's pods give %s", node, got, want)
		}
		held := n.held(snap, name, gpuRes)
		alloc, avail := zoneFigures(obj, gpuRes)
		if offered := int64(len(devices.IDs(snap.Allocatable, gpuRes))); alloc != offered || avail != offered-int64(len(held)) {
			t.Errorf("%s: zones say %d GPUs allocatable, %d available; the kubelet offers %d and %s holds %v", node, alloc, avail, offered, name, held)
		}
		var observed []string
		for _, g := range e.observed(t, name).GPUs {
			observed = append(observed, g.BusID)
		}
		slices.Sort(observed)
		if !slices.Equal(observed, held) {
			t.Errorf("%s: observed GPUs %v, the kubelet lists %v", name, observed, held)
		}
		var cpus []int
		for _, p := range snap.Pods {
			if p.Name == name {
				cpus = p.CPUs
			}
		}
		calloc, cavail := zoneFigures(obj, string(corev1.ResourceCPU))
		switch node {
		case "static":
			if len(snap.AllocatableCPUs) == 0 || len(cpus) != 1 {
				t.Errorf("static: the kubelet offers CPUs %v and gave %s %v; want exclusive CPUs and one of them", snap.AllocatableCPUs, name, cpus)
			}
			if calloc != int64(len(snap.AllocatableCPUs)) || cavail != calloc-int64(len(cpus)) {
				t.Errorf("static: zones say %d CPUs allocatable, %d available; the kubelet offers %v, %s holds %v", calloc, cavail, snap.AllocatableCPUs, name, cpus)
			}
		case "plain":
			if len(cpus) != 0 {
				t.Errorf("plain: %s holds exclusive CPUs %v under the none policy", name, cpus)
			}
		}
	}
}

// TestRealKubeletTopologyHints: the vendor plugin's NUMA topology passes
// through the proxy, as the kubelet's podresources shows, and with the
// Topology Manager at single-numa-node a planned pod is admitted with its
// plan.
func TestRealKubeletTopologyHints(t *testing.T) {
	single := func(o *realkubelet.Options) { o.TopologyManagerPolicy = "single-numa-node" }
	e := startEnv(t, nodeSpec{name: "numa", machine: machines.HalfNICs, opts: single})
	n := e.nodes["numa"]
	e.submit(t, podSpec{name: "aligned", gpus: 2, rdma: true})
	pod := e.waitPhase(t, "aligned", corev1.PodRunning, corev1.PodFailed)
	if pod.Status.Phase != corev1.PodRunning {
		t.Fatalf("single-numa-node refused the planned pod: %s: %s", pod.Status.Reason, pod.Status.Message)
	}
	e.followsPlan(t, "aligned")
	snap := n.snapshot()
	for _, d := range snap.Allocatable {
		if d.Resource == gpuRes && !slices.Equal(d.NUMANodes, []int{0}) {
			t.Errorf("the kubelet offers GPU %s on NUMA nodes %v; the vendor said [0]", d.ID, d.NUMANodes)
		}
	}
	for _, p := range snap.Pods {
		for _, d := range p.Devices {
			if d.Resource == gpuRes && !slices.Equal(d.NUMANodes, []int{0}) {
				t.Errorf("%s holds GPU %s on NUMA nodes %v; the vendor said [0]", p.Name, d.ID, d.NUMANodes)
			}
		}
	}
}
