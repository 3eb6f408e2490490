package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nicaffinity/nicaffinity/internal/cluster"
	"github.com/nicaffinity/nicaffinity/internal/controlplane"
	"github.com/nicaffinity/nicaffinity/internal/kubeletsim"
	"github.com/nicaffinity/nicaffinity/internal/schedulerrun"
	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
)

// env is a control plane, simulated nodes with real exporters, and the real
// scheduler with the shipped configuration plus a default-scheduler profile.
type env struct {
	cp *controlplane.ControlPlane
	cl *cluster.Cluster
	// sched is the running scheduler (restartScheduler replaces it).
	sched *schedulerrun.Scheduler
}

func startEnv(t *testing.T, specs ...cluster.NodeSpec) *env {
	t.Helper()
	return startEnvWith(t, cluster.DefaultOptions(), specs...)
}

func startEnvWith(t *testing.T, opts cluster.Options, specs ...cluster.NodeSpec) *env {
	t.Helper()
	cp := controlplane.Start(t)
	e := &env{cp: cp, cl: cluster.Start(t, cp, opts, specs...)}
	for _, s := range specs {
		e.waitNRT(t, s.Name, func(*v1alpha2.NodeResourceTopology) bool { return true })
	}
	e.startScheduler(t)
	return e
}

// startScheduler starts the scheduler with the shipped configuration plus
// a default-scheduler profile.
func (e *env) startScheduler(t *testing.T) {
	t.Helper()
	cfg, err := schedulerrun.ShippedConfig()
	if err != nil {
		t.Fatal(err)
	}
	e.sched = schedulerrun.Started(t, e.cp, schedulerrun.WithDefaultProfile(cfg))
}

// waitPluginObjects waits until the nicaffinity plugin's store holds
// exactly the NodeResourceTopology objects the apiserver serves, each at
// its resourceVersion. The pod and object events come on different
// informers, so a test that changes objects and then submits a pod waits
// here first: else the scheduler may decide on the versions before.
func (e *env) waitPluginObjects(t *testing.T) {
	t.Helper()
	var want, got map[string]string
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := e.cp.NRT.TopologyV1alpha2().NodeResourceTopologies().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		want = map[string]string{}
		for _, o := range list.Items {
			want[o.Name] = o.ResourceVersion
		}
		got = e.sched.PluginObjects()
		return cmp.Equal(want, got), nil
	}); err != nil {
		t.Fatalf("the plugin's objects (-apiserver,+plugin):\n%s", cmp.Diff(want, got))
	}
}

// restartScheduler stops the scheduler and starts a fresh one (empty cache).
func (e *env) restartScheduler(t *testing.T) {
	t.Helper()
	e.sched.Stop()
	e.startScheduler(t)
}

func (e *env) waitNRT(t *testing.T, node string, cond func(*v1alpha2.NodeResourceTopology) bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		o, err := e.cp.NRT.TopologyV1alpha2().NodeResourceTopologies().Get(ctx, node, metav1.GetOptions{})
		return err == nil && cond(o), nil
	}); err != nil {
		t.Fatalf("NRT of %s: %v", node, err)
	}
}

type podOpts struct {
	scheduler string
	node      string // bind directly, bypassing schedulers
	rdma      bool
	vfs       int64
	cpu       string
	ann       map[string]string
}

func (e *env) submit(t *testing.T, name string, gpus int64, o podOpts) {
	t.Helper()
	limits := corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI)}
	if o.rdma {
		limits["rdma/hca"] = resource.MustParse("1")
	}
	if o.vfs > 0 {
		limits["openshift.io/sriov_highnet"] = *resource.NewQuantity(o.vfs, resource.DecimalSI)
	}
	if o.cpu != "" {
		limits[corev1.ResourceCPU] = resource.MustParse(o.cpu)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: o.ann},
		Spec: corev1.PodSpec{SchedulerName: o.scheduler, NodeName: o.node,
			Containers: []corev1.Container{{Name: "train", Image: "train", Resources: corev1.ResourceRequirements{Limits: limits, Requests: limits}}}},
	}
	if _, err := e.cp.Kube.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (e *env) pod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	p, err := e.cp.Kube.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitRunning waits until the simulated kubelet admitted the pod.
func (e *env) waitRunning(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := e.cp.Kube.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pod = p
		return p.Status.Phase == corev1.PodRunning, nil
	}); err != nil {
		t.Fatalf("pod %s not running (node %q, phase %q): %v", name, pod.Spec.NodeName, pod.Status.Phase, err)
	}
	return pod
}

// observed waits for the exporter's verdict on a pod.
func (e *env) observed(t *testing.T, name string) annotations.Observed {
	t.Helper()
	var out annotations.Observed
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := e.cp.Kube.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		v, ok := p.Annotations[annotations.ObservedKey]
		return ok, func() error {
			if ok {
				return json.Unmarshal([]byte(v), &out)
			}
			return nil
		}()
	}); err != nil {
		t.Fatalf("no observation for %s: %v", name, err)
	}
	return out
}

func halfNICNodes(names ...string) []cluster.NodeSpec {
	var out []cluster.NodeSpec
	for _, n := range names {
		out = append(out, cluster.NodeSpec{Name: n, Machine: machines.HalfNICs, Policy: kubeletsim.BestEffort})
	}
	return out
}

// TestE2ENICLessSwitches: three nodes whose GPUs 0-3 have no NIC; on a and c
// a job without RDMA (and with half the node's CPUs) already holds those four. 4-, 2- and 1-GPU RDMA pods
// through nicaffinity land where every GPU the device plugin can hand out has
// a PIX NIC, and the exporter sees them aligned; the default scheduler
// spreads by CPU and memory onto the empty node, where the device plugin
// hands out NIC-less GPUs.
func TestE2ENICLessSwitches(t *testing.T) {
	for _, tc := range []struct {
		scheduler   string
		wantAligned bool
	}{{"nicaffinity-scheduler", true}, {"default-scheduler", false}} {
		t.Run(tc.scheduler, func(t *testing.T) {
			e := startEnv(t, halfNICNodes("a", "b", "c")...)
			for _, n := range []string{"a", "c"} {
				e.submit(t, "batch-"+n, 4, podOpts{node: n, cpu: "96"})
				e.waitRunning(t, "batch-"+n)
				e.waitNRT(t, n, func(o *v1alpha2.NodeResourceTopology) bool { return zoneRes(o, "node-0", "nvidia.com/gpu") == "8/8/4" })
			}
			misaligned := 0
			for _, p := range []struct {
				name string
				gpus int64
			}{{"train-4", 4}, {"train-2", 2}, {"train-1", 1}} {
				e.submit(t, p.name, p.gpus, podOpts{scheduler: tc.scheduler, rdma: true})
				pod := e.waitRunning(t, p.name)
				o := e.observed(t, p.name)
				t.Logf("%s: %s on %s, level %s, aligned %v, plan %s", tc.scheduler, p.name, pod.Spec.NodeName, o.Level, o.Aligned, o.Plan)
				if !o.Aligned {
					misaligned++
				}
			}
			if tc.wantAligned && misaligned > 0 {
				t.Errorf("%d of 3 RDMA pods misaligned under nicaffinity", misaligned)
			}
			if !tc.wantAligned && misaligned == 0 {
				t.Errorf("the default scheduler aligned every pod: the scenario shows nothing")
			}
		})
	}
}

// TestE2EWholeNode: an 8-GPU RDMA pod is planned like any other (every GPU
// at its own NIC's PIX on an HGX H100) and runs aligned; an 8-GPU pod
// without RDMA is not the plugin's business: scheduled, no plan.
func TestE2EWholeNode(t *testing.T) {
	e := startEnv(t, cluster.NodeSpec{Name: "h100", Machine: machines.HGXH100}, cluster.NodeSpec{Name: "h100-b", Machine: machines.HGXH100})
	e.submit(t, "whole", 8, podOpts{scheduler: "nicaffinity-scheduler", rdma: true})
	pod := e.waitRunning(t, "whole")
	plan, err := annotations.ParseAllocation(pod.Annotations[annotations.AllocationKey])
	if err != nil || len(plan.GPUs) != 8 || plan.Level != "PIX" {
		t.Errorf("whole-node RDMA pod's plan %+v, %v; want all 8 GPUs at PIX", plan, err)
	}
	if o := e.observed(t, "whole"); !o.Aligned || o.Level != "PIX" {
		t.Errorf("whole-node pod observed %+v", o)
	}
	e.submit(t, "whole-plain", 8, podOpts{scheduler: "nicaffinity-scheduler"})
	pod = e.waitRunning(t, "whole-plain")
	if _, ok := pod.Annotations[annotations.AllocationKey]; ok {
		t.Errorf("whole-node pod without RDMA got a plan: %s", pod.Annotations[annotations.AllocationKey])
	}
}

// TestE2EBurst: 32 one-GPU RDMA pods at once on four 8-GPU nodes, faster than
// the exporters publish: no GPU is planned twice, and with a device plugin
// that follows plans, what the exporters observe matches every plan.
func TestE2EBurst(t *testing.T) {
	var specs []cluster.NodeSpec
	for i := 0; i < 4; i++ {
		specs = append(specs, cluster.NodeSpec{Name: fmt.Sprintf("h100-%d", i), Machine: machines.HGXH100, Policy: kubeletsim.Planned})
	}
	e := startEnv(t, specs...)
	var wg sync.WaitGroup
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			e.submit(t, fmt.Sprintf("burst-%02d", i), 1, podOpts{scheduler: "nicaffinity-scheduler", rdma: true})
		}(i)
	}
	wg.Wait()
	var names []string
	for i := 0; i < 32; i++ {
		names = append(names, fmt.Sprintf("burst-%02d", i))
	}
	e.checkPlansDisjointAndFollowed(t, names)
}

// TestE2EProxy: the allocation proxy's path. The kubelets' device plugin
// is NVIDIA's best effort (blind to NICs) behind nicaffinity's allocation
// proxy, which finds each admitted pod's plan from the request alone: every
// plan of a burst of 1-, 2- and 4-GPU RDMA pods filling the 12 GPUs of
// three half-NIC nodes that have a NIC is
// followed, and the exporters see each aligned.
func TestE2EProxy(t *testing.T) {
	var specs []cluster.NodeSpec
	for i := 0; i < 3; i++ {
		specs = append(specs, cluster.NodeSpec{Name: fmt.Sprintf("half-%d", i), Machine: machines.HalfNICs, Policy: kubeletsim.Proxy})
	}
	e := startEnv(t, specs...)
	var names []string
	for i, gpus := range []int64{1, 2, 1, 4, 2, 1, 1} { // the 12 GPUs with a NIC
		name := fmt.Sprintf("proxy-%02d", i)
		names = append(names, name)
		e.submit(t, name, gpus, podOpts{scheduler: "nicaffinity-scheduler", rdma: true})
	}
	e.checkPlansDisjointAndFollowed(t, names)
}

// checkPlansDisjointAndFollowed waits for each pod to run, checks that no two
// plans share a GPU, and that the exporter saw every plan followed, aligned.
func (e *env) checkPlansDisjointAndFollowed(t *testing.T, names []string) {
	t.Helper()
	planned := map[string]string{}
	for _, name := range names {
		pod := e.waitRunning(t, name)
		plan, err := annotations.ParseAllocation(pod.Annotations[annotations.AllocationKey])
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, g := range plan.GPUs {
			key := plan.Node + "/" + g
			if prev, dup := planned[key]; dup {
				t.Errorf("%s and %s both planned on %s", prev, name, key)
			}
			planned[key] = name
		}
		if o := e.observed(t, name); o.Plan != "matched" || !o.Aligned {
			t.Errorf("%s: observed %+v, want the plan matched and aligned", name, o)
		}
	}
}

// TestE2ETopologyUnavailable: a node whose object is deleted (exporter
// stopped) or garbled is "topology unknown": required pods are rejected there
// with the reason, and placed once the exporter publishes again.
func TestE2ETopologyUnavailable(t *testing.T) {
	e := startEnv(t, cluster.NodeSpec{Name: "gone", Machine: machines.HGXH100}, cluster.NodeSpec{Name: "garbled", Machine: machines.HGXH100})
	ctx := context.Background()
	e.cl.Nodes["gone"].StopExporter()
	if err := e.cp.NRT.TopologyV1alpha2().NodeResourceTopologies().Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.cl.Nodes["garbled"].StopExporter()
	patch := []byte(`{"attributes":[{"name":"nicaffinity.io/schema","value":"0"}]}`)
	if _, err := e.cp.NRT.TopologyV1alpha2().NodeResourceTopologies().Patch(ctx, "garbled", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// A scheduler that had not seen the changes would place the pod, by
	// what it had seen, and the rejection would never come.
	e.waitPluginObjects(t)
	e.submit(t, "waiting", 2, podOpts{scheduler: "nicaffinity-scheduler", rdma: true})
	msg := waitFailedScheduling(t, e.cp, "waiting")
	for _, want := range []string{"no NodeResourceTopology for this node", "NodeResourceTopology cannot be read"} {
		if !strings.Contains(msg, want) {
			t.Errorf("FailedScheduling %q lacks %q", msg, want)
		}
	}
	t.Logf("while unavailable: %s", msg)
	if err := e.cl.Nodes["gone"].StartExporter(); err != nil {
		t.Fatal(err)
	}
	e.waitNRT(t, "gone", func(*v1alpha2.NodeResourceTopology) bool { return true })
	t.Logf("NRT back")
	if pod := e.waitRunning(t, "waiting"); pod.Spec.NodeName != "gone" {
		t.Errorf("placed on %s, want gone (the node whose exporter came back)", pod.Spec.NodeName)
	}
}

func waitFailedScheduling(t *testing.T, cp *controlplane.ControlPlane, pod string) string {
	t.Helper()
	var msg string
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		events, err := cp.Kube.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, ev := range events.Items {
			if ev.InvolvedObject.Name == pod && ev.Reason == "FailedScheduling" {
				msg = ev.Message
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		where := "not bound"
		if p, err := cp.Kube.CoreV1().Pods("default").Get(context.Background(), pod, metav1.GetOptions{}); err != nil {
			where = err.Error()
		} else if p.Spec.NodeName != "" {
			where = "bound to " + p.Spec.NodeName
		}
		t.Fatalf("no FailedScheduling for %s (%s; its events: %s): %v", pod, where, eventsOf(t, cp, pod), err)
	}
	return msg
}

func eventsOf(t *testing.T, cp *controlplane.ControlPlane, pod string) string {
	events, err := cp.Kube.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, ev := range events.Items {
		if ev.InvolvedObject.Name == pod {
			out = append(out, ev.Reason+": "+ev.Message)
		}
	}
	return strings.Join(out, " | ")
}

// TestE2ESchedulerRestart: the exporters publish slowly (every 15 s at most);
// a scheduler places four pods (packed onto one node), is replaced by a fresh
// one with an empty cache, and four more pods arrive before the objects catch up. The new
// scheduler adopts the plans of bound pods, so no GPU is planned twice and
// every pod runs where it was planned.
func TestE2ESchedulerRestart(t *testing.T) {
	// Mostly waiting (leases, resync periods, restarts): run beside the
	// other waiting tests, each with its own control plane.
	t.Parallel()
	opts := cluster.DefaultOptions()
	opts.MinWriteInterval = 15 * time.Second
	e := startEnvWith(t, opts,
		cluster.NodeSpec{Name: "h100-a", Machine: machines.HGXH100, Policy: kubeletsim.Planned},
		cluster.NodeSpec{Name: "h100-b", Machine: machines.HGXH100, Policy: kubeletsim.Planned})
	for i := 0; i < 4; i++ {
		e.submit(t, fmt.Sprintf("before-%d", i), 1, podOpts{scheduler: "nicaffinity-scheduler", rdma: true})
	}
	for i := 0; i < 4; i++ {
		e.waitRunning(t, fmt.Sprintf("before-%d", i))
	}
	e.restartScheduler(t)
	for i := 0; i < 4; i++ {
		e.submit(t, fmt.Sprintf("after-%d", i), 1, podOpts{scheduler: "nicaffinity-scheduler", rdma: true})
	}
	var names []string
	for _, phase := range []string{"before", "after"} {
		for i := 0; i < 4; i++ {
			names = append(names, fmt.Sprintf("%s-%d", phase, i))
		}
	}
	e.checkPlansDisjointAndFollowed(t, names)
}

// TestE2ESRIOV: VFs exist on mlx5_0 (next to GPUs 0,1) and mlx5_6 (next to
// GPUs 6,7), two each. Two 1-GPU pods with one VF take mlx5_0's VFs; the next
// two go where free VFs sit next to free GPUs: GPUs 6,7 with mlx5_6.
func TestE2ESRIOV(t *testing.T) {
	e := startEnv(t, cluster.NodeSpec{Name: "h20", Machine: machines.H20SRIOV, Policy: kubeletsim.Planned})
	nics := map[string]int{}
	for i := 0; i < 4; i++ {
		name := fmt.Sprintf("vf-%d", i)
		e.submit(t, name, 1, podOpts{scheduler: "nicaffinity-scheduler", vfs: 1})
		e.waitRunning(t, name)
		o := e.observed(t, name)
		if !o.Aligned || o.Level != "PIX" || len(o.NICs) != 1 {
			t.Errorf("%s observed %+v, want aligned at PIX on one NIC", name, o)
			continue
		}
		nics[o.NICs[0]]++
	}
	if nics["mlx5_0"] != 2 || nics["mlx5_6"] != 2 {
		t.Errorf("VF pods per NIC %v, want two on mlx5_0 and two on mlx5_6", nics)
	}
	// Every VF is taken now: a fifth VF pod has nowhere to go.
	e.submit(t, "vf-4", 1, podOpts{scheduler: "nicaffinity-scheduler", vfs: 1})
	if msg := waitFailedScheduling(t, e.cp, "vf-4"); !strings.Contains(msg, "openshift.io/sriov_highnet") {
		t.Errorf("FailedScheduling %q does not name the VF resource", msg)
	}
}

// TestE2ENonRDMAFirst: pods without RDMA take the GPUs without a NIC and leave
// the NIC-bearing switches whole for RDMA pods.
func TestE2ENonRDMAFirst(t *testing.T) {
	e := startEnv(t, cluster.NodeSpec{Name: "half", Machine: machines.HalfNICs, Policy: kubeletsim.Planned})
	for i := 0; i < 2; i++ {
		name := fmt.Sprintf("cpu-job-%d", i)
		e.submit(t, name, 2, podOpts{scheduler: "nicaffinity-scheduler"})
		pod := e.waitRunning(t, name)
		plan, _ := annotations.ParseAllocation(pod.Annotations[annotations.AllocationKey])
		for _, g := range plan.GPUs {
			if g >= "0000:30:00.0" { // GPUs 4-7 (0000:32-43:00.0) sit next to the NICs
				t.Errorf("%s planned on %s, a GPU next to a NIC", name, g)
			}
		}
	}
	e.submit(t, "rdma-4", 4, podOpts{scheduler: "nicaffinity-scheduler", rdma: true})
	e.waitRunning(t, "rdma-4")
	if o := e.observed(t, "rdma-4"); !o.Aligned || o.Level != "PIX" {
		t.Errorf("rdma-4 observed %+v, want all four GPUs PIX to a NIC", o)
	}
}

// TestE2ECapacityFrees: the GPUs next to the NICs are held by a job without
// RDMA (bound by hand, the kubelet handing out GPUs 4-7 by plan), so an RDMA
// pod waits with the reason; when that job ends, the exporter publishes the
// freed GPUs and the pod is placed on them without anyone touching it.
func TestE2ECapacityFrees(t *testing.T) {
	e := startEnv(t, cluster.NodeSpec{Name: "half", Machine: machines.HalfNICs, Policy: kubeletsim.Planned})
	plan := annotations.Marshal(annotations.Allocation{Node: "half", GPUs: []string{"0000:32:00.0", "0000:33:00.0", "0000:42:00.0", "0000:43:00.0"}})
	// A pod this scheduler placed earlier (bound here directly, with its
	// plan): the scheduler holds its GPUs from the plan until the node's
	// object counts them, as after a restart.
	e.submit(t, "holder", 4, podOpts{scheduler: "nicaffinity-scheduler", node: "half", ann: map[string]string{annotations.AllocationKey: plan}})
	e.waitRunning(t, "holder")
	e.waitNRT(t, "half", func(o *v1alpha2.NodeResourceTopology) bool { return zoneRes(o, "node-0", "nvidia.com/gpu") == "8/8/4" })
	e.submit(t, "rdma-2", 2, podOpts{scheduler: "nicaffinity-scheduler", rdma: true})
	if msg := waitFailedScheduling(t, e.cp, "rdma-2"); !strings.Contains(msg, "none of the 4 free GPUs has a NIC at PXB or closer") {
		t.Errorf("FailedScheduling %q", msg)
	}
	if err := e.cp.Kube.CoreV1().Pods("default").Delete(context.Background(), "holder", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitRunning(t, "rdma-2")
	if o := e.observed(t, "rdma-2"); !o.Aligned || o.Level != "PIX" {
		t.Errorf("rdma-2 observed %+v, want PIX", o)
	}
}

// TestE2EGB200: on GB200 trays every GPU reaches its Grace's fast NICs at
// P2C (NCCL's rule; nvidia-smi prints SYS), which the default accepts: RDMA
// pods of 1 and 2 GPUs (part of a tray) and 4 (the whole tray) bind under
// required through the real apiserver and scheduler, each GPU observed at
// P2C by the exporter; a pod that turns NCCL's C2C rule off
// binds nowhere, and says why.
func TestE2EGB200(t *testing.T) {
	e := startEnv(t, cluster.NodeSpec{Name: "tray-a", Machine: machines.GB200Tray}, cluster.NodeSpec{Name: "tray-b", Machine: machines.GB200Tray})
	e.waitNRT(t, "tray-a", func(o *v1alpha2.NodeResourceTopology) bool {
		for _, z := range o.Zones {
			for _, a := range z.Attributes {
				if z.Name == "gpu-0" && a.Name == "ncclPath" && strings.Contains(a.Value, "mlx5_0=P2C") {
					return true
				}
			}
		}
		return false
	})
	for _, p := range []struct {
		name string
		gpus int64
	}{{"train-4", 4}, {"train-2", 2}, {"train-1", 1}} {
		// The whole tray first: the scheduler need not pack the smaller
		// pods onto one tray, and then no tray would be left whole.
		e.submit(t, p.name, p.gpus, podOpts{scheduler: "nicaffinity-scheduler", rdma: true})
		pod := e.waitRunning(t, p.name)
		o := e.observed(t, p.name)
		t.Logf("%s on %s: level %s, aligned %v, plan %s, GPUs %+v", p.name, pod.Spec.NodeName, o.Level, o.Aligned, o.Plan, o.GPUs)
		if !o.Aligned || o.Level != "P2C" || len(o.GPUs) != int(p.gpus) {
			t.Errorf("%s observed %+v; want %d GPUs aligned at P2C", p.name, o, p.gpus)
		}
		for _, g := range o.GPUs {
			if g.Level != "P2C" {
				t.Errorf("%s: GPU %s at %s to %s; want P2C", p.name, g.BusID, g.Level, g.NIC)
			}
		}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "no-c2c", Namespace: "default", Annotations: map[string]string{annotations.Policy: annotations.PolicyRequired}},
		Spec: corev1.PodSpec{SchedulerName: "nicaffinity-scheduler", Containers: []corev1.Container{{Name: "train", Image: "train",
			Env:       []corev1.EnvVar{{Name: "NCCL_NET_GDR_C2C", Value: "0"}},
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), "rdma/hca": resource.MustParse("1")}}}}},
	}
	if _, err := e.cp.Kube.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := e.cp.Kube.CoreV1().Pods("default").Get(ctx, "no-c2c", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if p.Spec.NodeName != "" {
			return false, fmt.Errorf("bound to %s", p.Spec.NodeName)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable && strings.Contains(c.Message, "NCCL_NET_GDR_C2C=0") {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Errorf("pod with NCCL_NET_GDR_C2C=0: %v", err)
	}
}

// priorityClasses creates the classes "low" (100) and "high" (10000) and
// waits until the Priority admission plugin, which reads classes from an
// informer, admits a pod of each: until then a pod naming one is refused
// ("no PriorityClass with name low was found").
func (e *env) priorityClasses(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for name, value := range map[string]int32{"low": 100, "high": 10000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if _, err := e.cp.Kube.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "priority-probe", Namespace: "default"},
			Spec: corev1.PodSpec{PriorityClassName: name, Containers: []corev1.Container{{Name: "c", Image: "c"}}}}
		var last error
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, last = e.cp.Kube.CoreV1().Pods("default").Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return last == nil, nil
		}); err != nil {
			t.Fatalf("PriorityClass %s not admitted: %v", name, last)
		}
	}
}

// TestE2EPreemptsTowardAlignment: a low-priority RDMA pod holds the only
// aligned GPUs of a half-NIC node; a high-priority aligned RDMA pod finds
// only PHB GPUs free, so DefaultPreemption, which sees through the
// plugin's RemovePod that evicting the low pod frees aligned GPUs, evicts
// it, and the high pod binds aligned.
func TestE2EPreemptsTowardAlignment(t *testing.T) {
	// The kubelet follows plans (the allocation proxy), so pods get the
	// GPUs the scheduler chose.
	e := startEnv(t, cluster.NodeSpec{Name: "a", Machine: machines.HalfNICs, Policy: kubeletsim.Proxy})
	ctx := context.Background()
	e.priorityClasses(t)
	submit := func(name, class string, gpus int64) {
		pod := rdmaPod(name, gpus, nil)
		pod.Spec.PriorityClassName = class
		e.create(t, pod)
	}
	submit("low", "low", 4)
	e.waitRunning(t, "low")
	if o := e.observed(t, "low"); !o.Aligned {
		t.Fatalf("the low-priority pod is not aligned (%+v): the scenario needs it on the aligned GPUs", o)
	}
	submit("high", "high", 2)
	high := e.waitRunning(t, "high")
	if o := e.observed(t, "high"); !o.Aligned {
		t.Errorf("the high-priority pod runs misaligned: %+v", o)
	}
	if _, err := e.cp.Kube.CoreV1().Pods("default").Get(ctx, "low", metav1.GetOptions{}); err == nil {
		t.Errorf("the low-priority pod is still there; the high one is on %s", high.Spec.NodeName)
	}
}
