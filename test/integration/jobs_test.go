package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/features"

	"github.com/nicaffinity/nicaffinity/internal/cluster"
	"github.com/nicaffinity/nicaffinity/internal/controlplane"
	"github.com/nicaffinity/nicaffinity/internal/kubeletsim"
	"github.com/nicaffinity/nicaffinity/internal/schedulerrun"
	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/request"
)

// startJobsEnv is startEnv on a control plane that serves PodGroups, with
// GenericWorkload on in the scheduler (GangScheduling in its default
// plugins, as the shipped scheduler runs), half-NIC nodes whose exporters
// publish each NIC's rail by PCI rank, and kubelets that follow plans.
func startJobsEnv(t *testing.T, nodes ...string) *env {
	t.Helper()
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.GenericWorkload, true)
	cp := controlplane.Start(t, controlplane.WithWorkloads())
	opts := cluster.DefaultOptions()
	opts.RailSource = nrt.RailFromPCIRank
	var specs []cluster.NodeSpec
	for _, n := range nodes {
		specs = append(specs, cluster.NodeSpec{Name: n, Machine: machines.HalfNICs, Policy: kubeletsim.Proxy})
	}
	e := &env{cp: cp, cl: cluster.Start(t, cp, opts, specs...)}
	for _, n := range nodes {
		e.waitNRT(t, n, hasRails)
	}
	cfg, err := schedulerrun.ShippedConfig()
	if err != nil {
		t.Fatal(err)
	}
	e.sched = schedulerrun.Started(t, cp, cfg)
	return e
}

// hasRails: some NIC zone of the object carries its rail.
func hasRails(o *v1alpha2.NodeResourceTopology) bool {
	for _, z := range o.Zones {
		if z.Type == nrt.ZoneNIC && nrt.AttrValue(z.Attributes, nrt.AttrRail) != "" {
			return true
		}
	}
	return false
}

// gang creates a PodGroup that binds all n pods or none; edit, when not
// nil, changes its spec first.
func (e *env) gang(t *testing.T, name string, n int32, edit func(*schedulingv1beta1.PodGroupSpec)) {
	t.Helper()
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: n}}}}
	if edit != nil {
		edit(&pg.Spec)
	}
	if _, err := e.cp.Kube.SchedulingV1beta1().PodGroups("default").Create(context.Background(), pg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// create creates pod.
func (e *env) create(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	if _, err := e.cp.Kube.CoreV1().Pods(pod.Namespace).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// inGroup puts pod in podGroup.
func inGroup(pod *corev1.Pod, podGroup string) {
	pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &podGroup}
}

// worker creates an RDMA pod of gpus GPUs for the nicaffinity scheduler,
// in podGroup when it is not empty, with labels and annotations.
func (e *env) worker(t *testing.T, name string, gpus int64, podGroup string, labels, ann map[string]string) {
	t.Helper()
	pod := rdmaPod(name, gpus, ann)
	pod.Labels = labels
	if podGroup != "" {
		inGroup(pod, podGroup)
	}
	e.create(t, pod)
}

// railsOf is the plan's rails of a running pod, checked against what the
// exporter observed: aligned, and the NICs the plan named.
func (e *env) railsOf(t *testing.T, name string) string {
	t.Helper()
	p := e.waitRunning(t, name)
	plan, err := annotations.ParseAllocation(p.Annotations[annotations.AllocationKey])
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	o := e.observed(t, name)
	if !o.Aligned || o.Plan != "matched" {
		t.Errorf("%s on %s: observed %+v, want aligned and the plan followed", name, p.Spec.NodeName, o)
	}
	if len(plan.Rails) == 0 {
		t.Errorf("%s: the plan names no rails (%+v)", name, plan)
	}
	return strings.Join(plan.Rails, ",")
}

// TestE2EGangOnOneRailSet: a PodGroup of 4 pods x 2 GPUs on half-NIC
// nodes (two NICs each, rails 0 and 1, each next to one pair of GPUs) binds
// whole, every pod aligned as the exporter observes it and every pod on
// the same rail set. One of five nodes has only its rail-1 pair free (the
// node every other score ranks first for an RDMA pod), while an empty
// node's first choice is rail 0: the members must agree, in one pod-group
// cycle, through what the earlier members reserved.
func TestE2EGangOnOneRailSet(t *testing.T) {
	e := startJobsEnv(t, "a", "b", "c", "d", "e")
	e.filler(t, "fill-plain", 4, false, "e")
	e.waitRunning(t, "fill-plain")
	e.filler(t, "fill-rail0", 2, true, "e")
	e.waitRunning(t, "fill-rail0")
	e.gang(t, "train", 4, nil)
	for i := range 4 {
		e.worker(t, fmt.Sprintf("train-%d", i), 2, "train", nil, nil)
	}
	var rails []string
	nodes := map[string]bool{}
	for i := range 4 {
		name := fmt.Sprintf("train-%d", i)
		rails = append(rails, e.railsOf(t, name))
		nodes[e.pod(t, name).Spec.NodeName] = true
	}
	if len(slices.Compact(slices.Clone(rails))) != 1 {
		t.Errorf("rail sets %v: the job's pods are on different rails", rails)
	}
	if len(nodes) != 4 {
		t.Errorf("nodes %v: one rail set of two GPUs a node puts the four pods on four nodes", nodes)
	}
	if pg, err := e.cp.Kube.SchedulingV1beta1().PodGroups("default").Get(context.Background(), "train", metav1.GetOptions{}); err != nil {
		t.Error(err)
	} else {
		t.Logf("PodGroup status: %+v", pg.Status.Conditions)
	}
}

// TestE2EGangAllOrNothing: a PodGroup of three 4-GPU RDMA pods on two
// half-NIC nodes (four aligned GPUs each) cannot be placed aligned: no
// member binds and none holds a GPU, so a second gang of two such pods,
// which needs every aligned GPU of both nodes, binds right after.
func TestE2EGangAllOrNothing(t *testing.T) {
	e := startJobsEnv(t, "a", "b")
	e.gang(t, "big", 3, nil)
	for i := range 3 {
		e.worker(t, fmt.Sprintf("big-%d", i), 4, "big", nil, nil)
	}
	waitFailedScheduling(t, e.cp, "big-0")
	e.gang(t, "fits", 2, nil)
	for i := range 2 {
		e.worker(t, fmt.Sprintf("fits-%d", i), 4, "fits", nil, nil)
	}
	for i := range 2 {
		e.railsOf(t, fmt.Sprintf("fits-%d", i))
	}
	// A scheduling attempt for big after fits bound must not have bound
	// part of it either.
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 2*time.Second, true, func(context.Context) (bool, error) {
		for i := range 3 {
			if n := e.pod(t, fmt.Sprintf("big-%d", i)).Spec.NodeName; n != "" {
				return false, fmt.Errorf("big-%d bound to %s", i, n)
			}
		}
		return false, nil
	}); err != nil && !wait.Interrupted(err) {
		t.Error(err)
	}
}

// TestE2EJobSetRailsPreferred: the same 4 x 2-GPU job without a PodGroup,
// known by its JobSet labels and placed pod by pod under the default
// rails: preferred, gets one rail set. After its first pod lands (on rail
// 0, the first switch of an empty node), another node is filled so that
// only its rail-1 pair is free: every GPU there is aligned, the node every
// other score ranks first, and the rails score alone keeps the job off it.
func TestE2EJobSetRailsPreferred(t *testing.T) {
	nodes := []string{"a", "b", "c", "d", "e"}
	e := startJobsEnv(t, nodes...)
	labels := map[string]string{request.JobSetLabel: "train", request.JobSetReplicatedJobLabel: "workers"}
	e.worker(t, "js-0", 2, "", labels, nil)
	rails := []string{e.railsOf(t, "js-0")}
	first := e.pod(t, "js-0").Spec.NodeName
	lure := nodes[0]
	if lure == first {
		lure = nodes[1]
	}
	e.filler(t, "fill-plain", 4, false, lure) // the NIC-less GPUs 4-7
	e.waitRunning(t, "fill-plain")
	e.filler(t, "fill-rail0", 2, true, lure) // the rail-0 pair
	e.waitRunning(t, "fill-rail0")
	for i := 1; i < 4; i++ {
		name := fmt.Sprintf("js-%d", i)
		e.worker(t, name, 2, "", labels, nil)
		rails = append(rails, e.railsOf(t, name))
		if n := e.pod(t, name).Spec.NodeName; n == lure {
			t.Errorf("%s went to %s, whose free GPUs are all on rail 1", name, n)
		}
	}
	if len(slices.Compact(slices.Clone(rails))) != 1 {
		t.Errorf("rail sets %v: the job's pods are on different rails", rails)
	}
}

// TestE2EPlacementScoreAligned: with TopologyAwareWorkloadScheduling on and
// a PodGroup constrained to one rack, the scheduler tries one placement per
// rack and nicaffinity's ScorePlacement picks the rack where the members
// are aligned and on one rail set. Racks 1 and 2 (one half-NIC node each)
// have only their NIC-less GPUs free, rack 3 (two empty half-NIC nodes)
// has aligned ones; every rack fits the whole gang under preferred, so the
// in-tree placement score (pods placed) ties them all and, without this
// plugin's score, the scheduler picks a rack at random: both gangs would
// land in rack 3 one time in nine.
func TestE2EPlacementScoreAligned(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.GenericWorkload, true)
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.TopologyAwareWorkloadScheduling, true)
	const rackLabel = "example.com/rack"
	racks := map[string]string{"a": "rack-1", "b": "rack-2", "c": "rack-3", "d": "rack-3"}
	e := startJobsEnv(t, "a", "b", "c", "d")
	for node, rack := range racks {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, rackLabel, rack)
		if _, err := e.cp.Kube.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"a", "b"} {
		e.filler(t, "fill-"+n, 4, true, n) // the four GPUs next to a NIC
		e.waitRunning(t, "fill-"+n)
	}
	preferred := map[string]string{annotations.Policy: annotations.PolicyPreferred}
	for _, job := range []string{"first", "second"} {
		e.gang(t, job, 2, func(s *schedulingv1beta1.PodGroupSpec) {
			s.SchedulingConstraints = &schedulingv1beta1.PodGroupSchedulingConstraints{
				Topology: []schedulingv1beta1.TopologyConstraint{{Key: rackLabel}}}
		})
		for i := range 2 {
			e.worker(t, fmt.Sprintf("%s-%d", job, i), 2, job, nil, preferred)
		}
		var rails []string
		for i := range 2 {
			name := fmt.Sprintf("%s-%d", job, i)
			rails = append(rails, e.railsOf(t, name))
			if n := e.pod(t, name).Spec.NodeName; racks[n] != "rack-3" {
				t.Errorf("%s went to %s in %s, where no GPU next to a NIC is free", name, n, racks[n])
			}
		}
		if rails[0] != rails[1] {
			t.Errorf("%s: rail sets %v: the job's pods are on different rails", job, rails)
		}
	}
}

// TestE2EGangPreemptsTowardAlignment: a high-priority PodGroup of two
// 2-GPU RDMA pods under required, on one half-NIC node whose four aligned
// GPUs a low-priority pod holds, preempts it through 1.37's pod-group
// preemption and binds whole and aligned. That preemption takes its
// victims out of the scheduler's snapshot and runs the group on fresh
// cycle states, so the plugin must see there what the victims would free.
func TestE2EGangPreemptsTowardAlignment(t *testing.T) {
	e := startJobsEnv(t, "a")
	ctx := context.Background()
	e.priorityClasses(t)
	submit := func(name, class, podGroup string, gpus int64) {
		pod := rdmaPod(name, gpus, nil)
		pod.Spec.PriorityClassName = class
		if podGroup != "" {
			inGroup(pod, podGroup)
		}
		e.create(t, pod)
	}
	submit("low", "low", "", 4)
	e.waitRunning(t, "low")
	if o := e.observed(t, "low"); !o.Aligned {
		t.Fatalf("the low-priority pod is not aligned (%+v): the scenario needs it on the aligned GPUs", o)
	}
	// The group's priority must be its members'.
	e.gang(t, "train", 2, func(s *schedulingv1beta1.PodGroupSpec) { s.PriorityClassName = "high" })
	for i := range 2 {
		submit(fmt.Sprintf("train-%d", i), "high", "train", 2)
	}
	for i := range 2 {
		e.railsOf(t, fmt.Sprintf("train-%d", i))
	}
	if _, err := e.cp.Kube.CoreV1().Pods("default").Get(ctx, "low", metav1.GetOptions{}); err == nil {
		t.Errorf("the low-priority pod is still there")
	}
}

// filler runs a pod of no job on node: gpus GPUs, with or without RDMA.
func (e *env) filler(t *testing.T, name string, gpus int64, rdma bool, node string) {
	t.Helper()
	limits := corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI)}
	if rdma {
		limits["rdma/hca"] = resource.MustParse("1")
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{SchedulerName: "nicaffinity-scheduler", NodeSelector: map[string]string{"kubernetes.io/hostname": node},
			Containers: []corev1.Container{{Name: "fill", Image: "fill", Resources: corev1.ResourceRequirements{Limits: limits, Requests: limits}}}}}
	if _, err := e.cp.Kube.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
