//go:build cluster

package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
)

const (
	gpuRes  = "nvidia.com/gpu"
	rdmaRes = "rdma/rdma_shared_device_a"
	vfRes   = "openshift.io/sriov_highnet"
	ns      = "default"
)

// workload is a training pod: it prints its environment and waits.
type workload struct {
	name      string
	gpus, vfs int64
	rdma      bool
	podGroup  string
	scheduler string
	// node, when set, pins the pod there (a nodeSelector on the hostname).
	node string
	// policy, when set, is the pod's nicaffinity.io/policy.
	policy string
}

func (w workload) pod() *corev1.Pod {
	limits := corev1.ResourceList{gpuRes: *resource.NewQuantity(w.gpus, resource.DecimalSI)}
	if w.rdma {
		limits[rdmaRes] = resource.MustParse("1")
	}
	if w.vfs > 0 {
		limits[vfRes] = *resource.NewQuantity(w.vfs, resource.DecimalSI)
	}
	s := w.scheduler
	if s == "" {
		s = "nicaffinity-scheduler"
	}
	grace := int64(1)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: ns},
		Spec: corev1.PodSpec{SchedulerName: s, TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "train", Image: pauseRef, ImagePullPolicy: corev1.PullNever, Args: []string{"-env"},
				Resources: corev1.ResourceRequirements{Limits: limits, Requests: limits}}}},
	}
	if w.node != "" {
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": w.node}
	}
	if w.policy != "" {
		p.Annotations = map[string]string{annotations.Policy: w.policy}
	}
	if w.podGroup != "" {
		g := w.podGroup
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: &g}
	}
	return p
}

func (e *env) create(ws ...workload) {
	e.t.Helper()
	for _, w := range ws {
		if _, err := e.c.Kube.CoreV1().Pods(ns).Create(context.Background(), w.pod(), metav1.CreateOptions{}); err != nil {
			e.t.Fatalf("creating %s: %v", w.name, err)
		}
	}
}

func (e *env) gang(name string, n int32) {
	e.t.Helper()
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: n}}}}
	if _, err := e.c.Kube.SchedulingV1beta1().PodGroups(ns).Create(context.Background(), pg, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// waitRunning waits until the pod runs and returns it.
func (e *env) waitRunning(name string) *corev1.Pod {
	e.t.Helper()
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := e.c.Healthy(); err != nil {
			return false, err
		}
		p, err := e.c.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pod = p
		return p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		e.t.Fatalf("pod %s not Running: %v\n%s", name, err, e.kubectl("describe", "pod", "-n", ns, name))
	}
	return pod
}

// env is a running container's environment, from its log.
func (e *env) containerEnv(name string) map[string]string {
	e.t.Helper()
	out := map[string]string{}
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		raw, err := e.c.Kube.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Container: "train"}).DoRaw(ctx)
		if err != nil {
			return false, nil
		}
		sc := bufio.NewScanner(strings.NewReader(string(raw)))
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), "="); ok {
				out[k] = v
			}
		}
		return len(out) > 0, nil
	})
	if err != nil {
		e.t.Fatalf("pod %s: no environment in its log: %v", name, err)
	}
	return out
}

// plan is a pod's plan.
func plan(pod *corev1.Pod) (annotations.Allocation, error) {
	return annotations.ParseAllocation(pod.Annotations[annotations.AllocationKey])
}

// observed waits for the exporter's verdict on a pod.
func (e *env) observed(name string) annotations.Observed {
	e.t.Helper()
	var out annotations.Observed
	var perr error
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := e.c.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		v, ok := p.Annotations[annotations.ObservedKey]
		if ok {
			perr = json.Unmarshal([]byte(v), &out)
		}
		return ok, nil
	})
	if err != nil || perr != nil {
		e.t.Fatalf("no observation for %s: %v %v", name, err, perr)
	}
	return out
}

func (e *env) deleteAll() {
	e.t.Helper()
	ctx := context.Background()
	if err := e.c.Kube.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		e.t.Fatal(err)
	}
	_ = e.c.Kube.SchedulingV1beta1().PodGroups(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	if err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := e.c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 0, nil
	}); err != nil {
		e.t.Fatalf("pods not gone: %v", err)
	}
}

// mismatch says how a running pod's container environment differs from
// its plan, or "" when it carries exactly the plan's GPUs (and, with
// RDMA, the plan's NICs in NCCL_IB_HCA).
func (e *env) mismatch(w workload) string {
	pod := e.waitRunning(w.name)
	a, err := plan(pod)
	if err != nil {
		return fmt.Sprintf("no plan: %v", err)
	}
	env := e.containerEnv(w.name)
	ids := a.UUIDs
	if len(ids) == 0 {
		ids = a.GPUs
	}
	got := strings.Split(env["NVIDIA_VISIBLE_DEVICES"], ",")
	if !sameSet(got, ids) {
		return fmt.Sprintf("NVIDIA_VISIBLE_DEVICES=%s, plan %v", env["NVIDIA_VISIBLE_DEVICES"], ids)
	}
	if w.rdma {
		var want []string
		for _, nic := range a.NICs {
			want = append(want, nic+":1")
		}
		if got := env["NCCL_IB_HCA"]; got != "="+strings.Join(want, ",") {
			return fmt.Sprintf("NCCL_IB_HCA=%q, plan's NICs %v", got, a.NICs)
		}
	}
	return ""
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// placements are the rounds of the placement test: RDMA pods of 1, 2 and
// 4 GPUs with a VF pod (which only the H20 can take), then a pod of a
// whole node, then a gang of two pods that no node can hold both of.
var placements = [][]workload{
	{{name: "vf", gpus: 1, vfs: 1}, {name: "rdma1", gpus: 1, rdma: true}, {name: "rdma2", gpus: 2, rdma: true}, {name: "rdma4", gpus: 4, rdma: true}},
	{{name: "whole", gpus: 8, rdma: true}},
	{{name: "gang-0", gpus: 6, rdma: true, podGroup: "gang"}, {name: "gang-1", gpus: 6, rdma: true, podGroup: "gang"}},
}

// runPlacements runs the rounds and returns, per pod, how its container
// differs from its plan.
func (e *env) runPlacements() map[string]string {
	e.t.Helper()
	bad := map[string]string{}
	for _, round := range placements {
		if round[0].podGroup != "" {
			e.gang(round[0].podGroup, int32(len(round)))
		}
		e.create(round...)
		nodes := map[string]bool{}
		for _, w := range round {
			if m := e.mismatch(w); m != "" {
				bad[w.name] = m
			}
			pod := e.waitRunning(w.name)
			nodes[pod.Spec.NodeName] = true
			if o := e.observed(w.name); !o.Aligned && bad[w.name] == "" {
				bad[w.name] = fmt.Sprintf("the exporter observed %+v, not aligned", o)
			}
		}
		if round[0].podGroup != "" && len(nodes) != 2 {
			e.t.Errorf("the gang ran on %v, want two nodes", nodes)
		}
		e.deleteAll()
	}
	return bad
}

// TestClusterPlacement: pods of the nicaffinity scheduler run in real
// containers with exactly their plans' GPUs and NICs in their own
// environment, and the exporter observes them aligned.
func TestClusterPlacement(t *testing.T) {
	e := startEnv(t)
	if os.Getenv("NICAFFINITY_CLUSTER_NEGATIVE") == "no-proxy" {
		// The negative switch: without the allocation proxy the vendor
		// plugin chooses, and the containers' GPUs are not all the plans'.
		e.installWithoutProxy()
		bad := e.runPlacements()
		gpus := 0
		for _, why := range bad {
			if strings.HasPrefix(why, "NVIDIA_VISIBLE_DEVICES") {
				gpus++
			}
		}
		if gpus == 0 {
			t.Fatalf("without the allocation proxy every container's NVIDIA_VISIBLE_DEVICES was still its plan's: the test cannot tell (%v)", bad)
		}
		t.Logf("without the proxy, as expected, containers differ from their plans: %v", bad)
		return
	}
	e.install()
	if bad := e.runPlacements(); len(bad) > 0 {
		t.Errorf("containers whose devices are not their plans: %v", bad)
	}
}
