//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestClusterTwoSchedulers: default-scheduler GPU pods and nicaffinity
// pods arrive together on the same nodes, more than the GPUs there are.
// The two schedulers race for the same GPUs: a default-scheduler pod may
// be admitted on GPUs another pod's plan names, and the kubelet then
// gives the planned pod other GPUs (the allocation proxy cannot refuse:
// the device-plugin API does not say which pod a request is for). What
// must hold, and does: every nicaffinity pod that does not get its plan
// is said to, on the pod (observed "differs", and the exporter's Event
// saying the node did not follow the plan), and every pod that does not
// run says why in its status. docs/scheduler.md, "Two schedulers on one node", says how
// to keep them apart.
func TestClusterTwoSchedulers(t *testing.T) {
	e := startEnv(t)
	e.install()
	var ws []workload
	for i := range 5 {
		ws = append(ws, workload{name: fmt.Sprintf("nic-%d", i), gpus: 2, rdma: true},
			workload{name: fmt.Sprintf("def-%d", i), gpus: 2, scheduler: "default-scheduler"})
	}
	e.create(ws...)
	// Let both schedulers and both kubelets settle: each pod runs, fails,
	// or waits with a reason.
	settled := map[string]string{}
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, w := range ws {
			p, err := e.c.Kube.CoreV1().Pods(ns).Get(ctx, w.name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			switch {
			case p.Status.Phase == corev1.PodRunning:
				settled[w.name] = "running on " + p.Spec.NodeName
			case p.Status.Phase == corev1.PodFailed:
				settled[w.name] = fmt.Sprintf("failed: %s: %s", p.Status.Reason, p.Status.Message)
			case p.Spec.NodeName == "" && unschedulable(p) != "":
				settled[w.name] = "pending: " + unschedulable(p)
			default:
				delete(settled, w.name)
			}
		}
		return len(settled) == len(ws), nil
	})
	if err != nil {
		t.Fatalf("pods did not settle: %v (settled: %v)\n%s", err, settled, e.kubectl("get", "pods", "-n", ns, "-o", "wide"))
	}
	running, notFollowed := 0, 0
	for _, w := range ws {
		t.Logf("%s: %s", w.name, settled[w.name])
		p, _ := e.c.Kube.CoreV1().Pods(ns).Get(context.Background(), w.name, metav1.GetOptions{})
		switch {
		case p.Status.Phase == corev1.PodRunning:
			running++
			if w.scheduler == "" {
				if m := e.mismatch(w); m != "" {
					notFollowed++
					if o := e.observed(w.name); o.Plan != "differs" {
						t.Errorf("%s runs with devices other than its plan (%s), but the exporter observed plan %q", w.name, m, o.Plan)
					}
					if !e.hasEvent(w.name, "did not follow the scheduler's plan") {
						t.Errorf("%s runs with devices other than its plan (%s), and no Event on it says so", w.name, m)
					}
				}
			}
		case p.Status.Phase == corev1.PodFailed && (p.Status.Reason == "" || p.Status.Message == ""):
			t.Errorf("%s failed without a reason a user can act on: %+v", w.name, p.Status)
		}
	}
	if running < 6 {
		t.Errorf("only %d of %d pods run on 16 GPUs", running, len(ws))
	}
	t.Logf("%d of the nicaffinity pods that run did not get their plan, each reported", notFollowed)
}

// hasEvent says whether a pod has an Event whose message says text.
func (e *env) hasEvent(pod, text string) bool {
	ok := false
	_ = wait.PollUntilContextTimeout(context.Background(), time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := e.c.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
		if err != nil {
			return false, nil
		}
		for _, ev := range l.Items {
			if strings.Contains(ev.Message, text) {
				ok = true
			}
		}
		return ok, nil
	})
	return ok
}

// unschedulable is a pending pod's scheduler message, or "".
func unschedulable(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return c.Reason + ": " + c.Message
		}
	}
	return ""
}
