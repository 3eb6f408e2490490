//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/kubectl/pkg/util/podutils"

	"github.com/nicaffinity/nicaffinity/pkg/doctor"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
)

// poll waits for cond, failing the test with what.
func (e *env) poll(what string, timeout time.Duration, cond func(ctx context.Context) (bool, error)) {
	e.t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := e.c.Healthy(); err != nil {
			return false, err
		}
		return cond(ctx)
	}); err != nil {
		e.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// waitUnschedulable waits until the scheduler gives up on a pod.
func (e *env) waitUnschedulable(name string) {
	e.t.Helper()
	e.poll("the scheduler to give up on "+name, time.Minute, func(ctx context.Context) (bool, error) {
		p, err := e.c.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	})
}

// leader is the scheduler's lease holder.
func (e *env) leader(ctx context.Context) string {
	l, err := e.c.Kube.CoordinationV1().Leases(schedNS).Get(ctx, "nicaffinity-scheduler", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// freeGPUs is the node object's available GPUs (its NUMA zones).
func (e *env) freeGPUs(ctx context.Context, node string) (int64, error) {
	o, err := e.nrt(ctx, node)
	if err != nil {
		return 0, err
	}
	// One zone per NUMA node; GPU zones would count the GPUs again.
	var free int64
	found := false
	for _, z := range o.Zones {
		if z.Type != nrt.ZoneNode {
			continue
		}
		for _, r := range z.Resources {
			if r.Name == gpuRes {
				free += r.Available.Value()
				found = true
			}
		}
	}
	if !found {
		return 0, fmt.Errorf("node %s: no %s in its NUMA zones", node, gpuRes)
	}
	return free, nil
}

// deletePod deletes the one pod of ns matching selector on node and waits
// for its replacement to be Ready.
func (e *env) replacePod(namespace, selector, node string) {
	e.t.Helper()
	ctx := context.Background()
	l, err := e.c.Kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector, FieldSelector: "spec.nodeName=" + node})
	if err != nil || len(l.Items) != 1 {
		e.t.Fatalf("%s %s on %s: %v, %d pods", namespace, selector, node, err, len(l.Items))
	}
	old := l.Items[0].UID
	if err := e.c.Kube.CoreV1().Pods(namespace).Delete(ctx, l.Items[0].Name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.poll(fmt.Sprintf("a new %s pod on %s", selector, node), 2*time.Minute, func(ctx context.Context) (bool, error) {
		l, err := e.c.Kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector, FieldSelector: "spec.nodeName=" + node})
		if err != nil || len(l.Items) != 1 {
			return false, nil
		}
		p := l.Items[0]
		return p.UID != old && p.Status.Phase == corev1.PodRunning && podutils.IsPodReady(&p), nil
	})
}

// TestClusterDayTwo: what an admin does after installing. Installed with
// defaultPolicy required, a pod no node can align waits, and kubectl
// nicaffinity why says why; helm upgrade back to the shipped default,
// bounded, takes effect and places it at once (no node could align it,
// so it does not wait). Deleting the scheduler's leader hands the lease to the other
// replica, which places the next pod. Deleting the exporter, the proxy
// and the vendor plugin on a node leaves its training pod running,
// untouched, and the node's object right once they are back. helm
// uninstall leaves the CRD and nothing of ours running.
func TestClusterDayTwo(t *testing.T) {
	e := startEnv(t)
	e.install("--set", "scheduler.pluginArgs.defaultPolicy=required")
	ctx := context.Background()

	// On the HGX, so that the H20 stays whole for the pod below.
	train := workload{name: "train", gpus: 4, rdma: true, node: "gpu-a"}
	e.create(train)
	running := e.waitRunning(train.name)
	node := running.Spec.NodeName

	// Eight GPUs and a VF: only the H20 has VFs, and not eight GPUs next
	// to its VF NICs, so required leaves it Pending; bounded places it on
	// the whole H20.
	stuck := workload{name: "stuck", gpus: 8, vfs: 1}
	e.create(stuck)
	e.waitUnschedulable(stuck.name)
	why, err := e.kubectlNicaffinity("why", stuck.name, "-n", ns)
	if err != nil || !strings.Contains(why, "gpu-b") {
		t.Errorf("kubectl nicaffinity why %s: %v\n%s", stuck.name, err, why)
	}

	// helm upgrade with another policy: the scheduler rolls and places it.
	leaderBefore := e.leader(ctx)
	e.helm(append(append([]string{"upgrade", "nicaffinity", chart(t)}, e.clusterValues()...), "--set", "scheduler.pluginArgs.defaultPolicy=bounded")...)
	e.poll(stuck.name+" placed once the policy is bounded", 3*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := e.c.Kube.CoreV1().Pods(ns).Get(ctx, stuck.name, metav1.GetOptions{})
		return err == nil && p.Spec.NodeName != "", nil
	})
	e.waitPodsReady(schedNS, 2, 3*time.Minute)
	if err := e.c.Kube.CoreV1().Pods(ns).Delete(ctx, stuck.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// Failover: delete the leader's pod.
	var leader string
	e.poll("a leader", time.Minute, func(ctx context.Context) (bool, error) {
		leader = e.leader(ctx)
		return leader != "" && leader != leaderBefore, nil
	})
	pod := strings.SplitN(leader, "_", 2)[0]
	if err := e.c.Kube.CoreV1().Pods(schedNS).Delete(ctx, pod, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting the leader %s: %v", leader, err)
	}
	e.poll("another replica to take the lease from "+leader, 2*time.Minute, func(ctx context.Context) (bool, error) {
		h := e.leader(ctx)
		return h != "" && h != leader, nil
	})
	next := workload{name: "next", gpus: 1, rdma: true}
	e.create(next)
	e.waitRunning(next.name)

	// The node agents go away and come back; the training pod stays.
	for _, agent := range []struct{ ns, selector string }{
		{nodeNS, "app.kubernetes.io/name=topology-exporter"},
		{nodeNS, "app.kubernetes.io/name=allocation-proxy"},
		{vendorNS, "app=device-plugin-standin"},
	} {
		e.replacePod(agent.ns, agent.selector, node)
	}
	after, err := e.c.Kube.CoreV1().Pods(ns).Get(ctx, train.name, metav1.GetOptions{})
	if err != nil || after.UID != running.UID || after.Status.Phase != corev1.PodRunning || after.Status.ContainerStatuses[0].RestartCount != 0 {
		t.Errorf("the training pod after its node's agents restarted: %v %+v", err, after.Status)
	}
	var used int64
	for _, w := range []*corev1.Pod{after, e.waitRunning(next.name)} {
		if w.Spec.NodeName == node {
			used += w.Spec.Containers[0].Resources.Limits.Name(gpuRes, "").Value()
		}
	}
	var seen string
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		free, err := e.freeGPUs(ctx, node)
		seen = fmt.Sprintf("%d free (%v)", free, err)
		return err == nil && free == 8-used, nil
	}); err != nil {
		o, _ := e.nrt(ctx, node)
		t.Fatalf("node %s's object does not show %d GPUs used again: %s\n%+v\n%s", node, used, seen, o, e.kubectl("describe", "node", node))
	}

	// Uninstall: the CRD stays, nothing of ours runs.
	e.helm("uninstall", "nicaffinity", "--wait", "--timeout", "3m")
	if _, err := e.c.Kube.Discovery().ServerResourcesForGroupVersion("topology.node.k8s.io/v1alpha2"); err != nil {
		t.Errorf("after uninstall the NodeResourceTopology API is gone: %v", err)
	}
	e.poll("nothing of nicaffinity running", 2*time.Minute, func(ctx context.Context) (bool, error) {
		for _, n := range []string{schedNS, nodeNS} {
			l, err := e.c.Kube.CoreV1().Pods(n).List(ctx, metav1.ListOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return false, nil
			}
			if err == nil && len(l.Items) > 0 {
				return false, nil
			}
		}
		return true, nil
	})
	left := e.kubectl("get", "clusterroles,clusterrolebindings,validatingadmissionpolicies,validatingadmissionpolicybindings,daemonsets,deployments,services,configmaps",
		"-A", "-l", "app.kubernetes.io/managed-by=Helm", "-o", "name")
	if strings.TrimSpace(left) != "" && !strings.Contains(left, "No resources found") {
		t.Errorf("after helm uninstall, objects of the release remain:\n%s", left)
	}
}

// nrt reads a node's NodeResourceTopology as doctor does.
func (e *env) nrt(ctx context.Context, node string) (*v1alpha2.NodeResourceTopology, error) {
	dyn, err := dynamic.NewForConfig(e.c.Config)
	if err != nil {
		return nil, err
	}
	return doctor.GetNRT(ctx, dyn, node)
}
