// Package pluginbench holds the NICAffinity plugin's micro-benchmarks, so
// that `go test -bench` (pkg/plugins/nicaffinity) and `nicaffinity-sim bench`
// (testing.Benchmark, no Go toolchain needed) run the same code.
package pluginbench

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/plugins/nicaffinity"
)

// Benchmark is one named micro-benchmark.
type Benchmark struct {
	Name string
	F    func(*testing.B)
}

const (
	rdma  = "rdma/hca"
	sriov = "openshift.io/sriov_highnet"
)

// Benchmarks: Filter and Score of one node per call, as the scheduler
// calls them once per candidate node, and the rest of a pod's cycle.
// Where PreFilter returns Skip (every node's view safe for a common
// request), the scheduler calls no Filter; the Filter benchmarks measure
// what it costs where it runs. Node shapes: an HGX H100 with some GPUs
// taken, and an H20 whose VFs sit on two of its NICs.
var Benchmarks = []Benchmark{
	{"Filter/h100-2gpu-rdma", filter(machines.HGXH100, pod(2, rdma, "1"), 0, 2, 5)},
	{"Filter/h100-4gpu-rdma", filter(machines.HGXH100, pod(4, rdma, "1"), 1)},
	{"Filter/h20-4gpu-2vf", filter(machines.H20SRIOV, pod(4, sriov, "2"))},
	{"Score/h100-2gpu-rdma", score(machines.HGXH100, pod(2, rdma, "1"), 0, 2, 5)},
	// A pod with its own max level misses the view's precomputed answers
	// and searches.
	{"Filter/h100-2gpu-rdma-search", filter(machines.HGXH100, withMaxLevel(pod(2, rdma, "1"), "PIX"), 0, 2, 5)},
	{"Score/h100-2gpu-rdma-search", score(machines.HGXH100, withMaxLevel(pod(2, rdma, "1"), "PIX"), 0, 2, 5)},
	// One call per node in turn over 5000 nodes, as a scheduling cycle
	// walks them: the views are no longer in the CPU's caches.
	{"Filter/5000-nodes-1gpu-rdma", manyNodes(5000, pod(1, rdma, "1"), false)},
	{"Score/5000-nodes-1gpu-rdma", manyNodes(5000, pod(1, rdma, "1"), true)},
	// The rest of a pod's work on the scheduling thread, over 5000 nodes:
	// PreFilter, then Reserve (the plan, and the node's view rebuilt with
	// the GPUs held) on one node in turn, then Unreserve, which rebuilds
	// the view again so that every call starts from the same views. A
	// bound pod's reservation ends on the informer's thread instead, with
	// the same rebuild. It allocates (the plan, the views): its figures are
	// followed, not held at 0.
	{"Cycle/5000-nodes-1gpu-rdma", reserveCycle(5000, pod(1, rdma, "1"))},
}

// ZeroAllocs reports whether a benchmark must stay at 0 allocations a
// call: Filter and Score, which run once per node.
func ZeroAllocs(name string) bool {
	return strings.HasPrefix(name, "Filter/") || strings.HasPrefix(name, "Score/")
}

func reserveCycle(n int, p *v1.Pod) func(*testing.B) {
	return func(b *testing.B) {
		pl, infos := nodes(b, n)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			name := infos[i%n].Node().Name
			i++
			cycle := framework.NewCycleState()
			if _, st := pl.PreFilter(b.Context(), cycle, p, infos); !st.IsSuccess() && !st.IsSkip() {
				b.Fatal(st)
			}
			if st := pl.Reserve(b.Context(), cycle, p, name); !st.IsSuccess() {
				b.Fatal(st)
			}
			pl.Unreserve(b.Context(), cycle, p, name)
		}
	}
}

// nodes is the plugin over n HGX H100 nodes with three GPUs held, and
// their NodeInfos.
func nodes(b *testing.B, n int) (*nicaffinity.NICAffinity, []fwk.NodeInfo) {
	obj := object(b, machines.HGXH100, 0, 2, 5)
	objs := make([]*v1alpha2.NodeResourceTopology, n)
	infos := make([]fwk.NodeInfo, n)
	for i := range objs {
		o := obj.DeepCopy()
		o.Name = fmt.Sprintf("gpu-%05d", i)
		objs[i] = o
		ni := framework.NewNodeInfo()
		ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: o.Name}, Status: v1.NodeStatus{Allocatable: v1.ResourceList{
			"nvidia.com/gpu": *resource.NewQuantity(8, resource.DecimalSI),
		}}})
		infos[i] = ni
	}
	args := nicaffinity.DefaultArgs()
	pl, err := nicaffinity.NewWithCache(args, nil, nicaffinity.NewStaticCache(args, objs...))
	if err != nil {
		b.Fatal(err)
	}
	return pl, infos
}

func manyNodes(n int, p *v1.Pod, scoring bool) func(*testing.B) {
	return func(b *testing.B) {
		pl, infos := nodes(b, n)
		cycle := framework.NewCycleState()
		if _, st := pl.PreFilter(b.Context(), cycle, p, infos); !st.IsSuccess() && !st.IsSkip() {
			b.Fatal(st)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			ni := infos[i%n]
			i++
			if scoring {
				if _, st := pl.Score(b.Context(), cycle, p, ni); !st.IsSuccess() {
					b.Fatal(st)
				}
			} else if st := pl.Filter(b.Context(), cycle, p, ni); !st.IsSuccess() {
				b.Fatal(st)
			}
		}
	}
}

func withMaxLevel(p *v1.Pod, level string) *v1.Pod {
	p.Annotations = map[string]string{annotations.MaxLevel: level}
	return p
}

func pod(gpus int64, res, n string) *v1.Pod {
	limits := v1.ResourceList{
		"nvidia.com/gpu":     *resource.NewQuantity(gpus, resource.DecimalSI),
		v1.ResourceName(res): resource.MustParse(n),
	}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: "default", UID: types.UID("uid-bench")},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Limits: limits, Requests: limits}}}},
	}
}

// object builds the machine's NodeResourceTopology as the exporter would,
// with the GPUs at positions used held by another pod; every VF is free.
func object(b *testing.B, build func(*machines.Tree), used ...int) *v1alpha2.NodeResourceTopology {
	dir, err := os.MkdirTemp("", "pluginbench")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	topo, err := machines.Discover(dir, build)
	if err != nil {
		b.Fatal(err)
	}
	var vfs []devices.Device
	for _, nic := range topo.NICs {
		for _, vf := range nic.VFs {
			vfs = append(vfs, devices.Device{Resource: sriov, ID: vf})
		}
	}
	obj, problems := nrt.ObjectFor("node", topo, vfs, used...)
	if len(problems) > 0 {
		b.Fatal(problems)
	}
	return obj
}

// setup is the plugin over one node's object, after PreFilter.
func setup(b *testing.B, build func(*machines.Tree), p *v1.Pod, used ...int) (*nicaffinity.NICAffinity, fwk.CycleState, fwk.NodeInfo) {
	args := nicaffinity.DefaultArgs()
	pl, err := nicaffinity.NewWithCache(args, nil, nicaffinity.NewStaticCache(args, object(b, build, used...)))
	if err != nil {
		b.Fatal(err)
	}
	ni := framework.NewNodeInfo()
	ni.SetNode(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node"}, Status: v1.NodeStatus{Allocatable: v1.ResourceList{
		"nvidia.com/gpu": *resource.NewQuantity(8, resource.DecimalSI),
	}}})
	cycle := framework.NewCycleState()
	if _, st := pl.PreFilter(b.Context(), cycle, p, []fwk.NodeInfo{ni}); !st.IsSuccess() && !st.IsSkip() {
		b.Fatal(st)
	}
	return pl, cycle, ni
}

func filter(build func(*machines.Tree), p *v1.Pod, used ...int) func(*testing.B) {
	return func(b *testing.B) {
		pl, cycle, ni := setup(b, build, p, used...)
		b.ReportAllocs()
		for b.Loop() {
			if st := pl.Filter(b.Context(), cycle, p, ni); !st.IsSuccess() {
				b.Fatal(st)
			}
		}
	}
}

func score(build func(*machines.Tree), p *v1.Pod, used ...int) func(*testing.B) {
	return func(b *testing.B) {
		pl, cycle, ni := setup(b, build, p, used...)
		b.ReportAllocs()
		for b.Loop() {
			if _, st := pl.Score(b.Context(), cycle, p, ni); !st.IsSuccess() {
				b.Fatal(st)
			}
		}
	}
}
