package nicaffinity

import (
	"testing"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/nrt/nrttest"
	"github.com/nicaffinity/nicaffinity/pkg/placement"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// machineNRT publishes a fixture machine's object through the real schema,
// with the GPUs at positions used taken by a pod.
func machineNRT(t testing.TB, node string, build func(*machines.Tree), used ...int) *v1alpha2.NodeResourceTopology {
	t.Helper()
	topo, err := machines.Discover(t.TempDir(), build)
	if err != nil {
		t.Fatal(err)
	}
	return buildNRT(node, topo, nil, used...)
}

func buildNRT(node string, topo *topology.Topology, extra []devices.Device, used ...int) *v1alpha2.NodeResourceTopology {
	obj, _ := nrttest.FromTopology(node, topo, extra, used...)
	obj.Generation = 7
	return obj
}

// handNRT is nrttest.HalfNICs: switches 0 and 1 hold a NIC, 2 and 3 do not.
func handNRT(node string, free ...int) *v1alpha2.NodeResourceTopology {
	return nrttest.HalfNICs(node, free...)
}

func newTestPlugin(t testing.TB, mutate func(*Args), objs ...*v1alpha2.NodeResourceTopology) (*NICAffinity, *Cache) {
	t.Helper()
	args := DefaultArgs()
	if mutate != nil {
		mutate(args)
	}
	cfg := storeConfigOf(args, testProfile)
	cfg.maxAge = 0 // freshness has tests of its own (TestStaleOnSchedulerClock)
	st := newCache(cfg)
	for _, o := range objs {
		c, err := nrt.Compile(o, args.GPUResourceName)
		st.set(o.Name, o.ResourceVersion, c, err, nil)
	}
	pl, err := NewWithCache(args, nil, st)
	if err != nil {
		t.Fatal(err)
	}
	pl.feed = &informerFeed{c: st}
	return pl, st
}

// makePod builds a pod requesting gpus GPUs and the given extra resources.
func makePod(name string, gpus int64, ann map[string]string, extra ...string) *v1.Pod {
	limits := v1.ResourceList{}
	if gpus > 0 {
		limits["nvidia.com/gpu"] = *resource.NewQuantity(gpus, resource.DecimalSI)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		limits[v1.ResourceName(extra[i])] = resource.MustParse(extra[i+1])
	}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name), Annotations: ann},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Limits: limits, Requests: limits}}}},
	}
}

const rdma = "rdma/hca"

// fits is feasible with a whole call's budget.
func (v *nodeView) fits(req *request, li int) bool {
	steps := placement.MaxCallSteps
	return v.Feasible(req, li, &steps)
}

// scoreOf is nodeScore with a whole call's budget.
func (pl *NICAffinity) scoreOf(v *nodeView, req *request) int64 {
	steps := placement.MaxCallSteps
	return pl.scoring.nodeScore(v, req, &steps)
}

// testProfile is the profile the test plugins' metrics count under.
const testProfile = "test-profile"

// observe feeds the cache an object as its informer edge would (without
// pods: nothing is confirmed).
func (c *Cache) observe(o *v1alpha2.NodeResourceTopology) { (&informerFeed{c: c}).observe(o) }

// withEnv sets env vars (name, value, ...) on the pod's first container.
func withEnv(p *v1.Pod, kv ...string) *v1.Pod {
	for i := 0; i+1 < len(kv); i += 2 {
		p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, v1.EnvVar{Name: kv[i], Value: kv[i+1]})
	}
	return p
}
