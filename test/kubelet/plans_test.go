//go:build kubelet

package kubelet

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nicaffinity/nicaffinity/pkg/allocproxy"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
)

// burst is the plans burst: RDMA pods of 1, 2 and 4 GPUs, same-size pods
// bound back to back, VF pods, a pod whose init container takes GPUs, and
// a pod of the default scheduler (no plan), on a half-NIC node (where the
// vendor's own choice, GPUs 0-1 first, is never the aligned one), an
// SR-IOV node and an HGX node: 16 GPUs of 24, 14 of them aligned.
var burst = []podSpec{
	{name: "rdma2-a", gpus: 2, rdma: true},
	{name: "rdma2-b", gpus: 2, rdma: true},
	{name: "rdma1-a", gpus: 1, rdma: true},
	{name: "rdma1-b", gpus: 1, rdma: true},
	{name: "rdma4", gpus: 4, rdma: true},
	{name: "vf-a", gpus: 1, vfs: 1},
	{name: "vf-b", gpus: 1, vfs: 1},
	{name: "vf-c", gpus: 1, vfs: 1},
	{name: "init", gpus: 2, rdma: true, initGPUs: 2},
	{name: "plain", gpus: 1, scheduler: "default-scheduler"},
}

func burstNodes(proxy func(*allocproxy.Config)) []nodeSpec {
	return []nodeSpec{
		{name: "half", machine: machines.HalfNICs, proxy: proxy},
		{name: "sriov", machine: machines.H20SRIOV, proxy: proxy},
		{name: "hgx", machine: machines.HGXH100, proxy: proxy},
	}
}

// runBurst submits the burst at once and returns, per pod, whether the
// kubelet handed it its plan (by podresources List), and why not.
func runBurst(t *testing.T, e *env) map[string]string {
	t.Helper()
	// VF pods go first: only the SR-IOV node takes them, and RDMA pods
	// bound before them could fill its GPUs next to the VFs' NICs.
	for _, ps := range burst {
		if ps.vfs > 0 {
			e.submit(t, ps)
		}
	}
	for _, ps := range burst {
		if ps.vfs > 0 {
			e.waitBound(t, ps.name)
		}
	}
	for _, ps := range burst {
		if ps.vfs == 0 {
			e.submit(t, ps)
		}
	}
	e.finishInit(t, "init", "warmup")
	notFollowed := map[string]string{}
	owner := map[string]string{}
	for _, ps := range burst {
		pod := e.waitPhase(t, ps.name, corev1.PodRunning, corev1.PodFailed)
		n := e.nodes[pod.Spec.NodeName]
		snap := n.snapshot()
		gpus := n.held(snap, ps.name, gpuRes)
		for _, g := range gpus {
			key := pod.Spec.NodeName + "/" + g
			if prev, dup := owner[key]; dup {
				t.Errorf("%s and %s both hold %s", prev, ps.name, key)
			}
			owner[key] = ps.name
		}
		if pod.Status.Phase != corev1.PodRunning {
			notFollowed[ps.name] = fmt.Sprintf("%s: %s", pod.Status.Reason, pod.Status.Message)
			continue
		}
		if int64(len(gpus)) != ps.gpus {
			t.Errorf("%s holds GPUs %v, want %d", ps.name, gpus, ps.gpus)
		}
		if ps.scheduler == "default-scheduler" {
			if _, ok := pod.Annotations["nicaffinity.io/allocation"]; ok {
				t.Errorf("%s, of the default scheduler, has a plan", ps.name)
			}
			continue
		}
		p := plan(t, pod)
		want := slices.Clone(p.GPUs)
		slices.Sort(want)
		var why []string
		if !slices.Equal(gpus, want) {
			why = append(why, fmt.Sprintf("GPUs %v, plan %v", gpus, want))
		}
		if ps.vfs > 0 {
			vfs := n.held(snap, ps.name, vfRes)
			if int64(len(vfs)) != ps.vfs {
				t.Errorf("%s holds VFs %v, want %d", ps.name, vfs, ps.vfs)
			}
			for _, vf := range vfs {
				if pf := n.pfOf(vf); !slices.Contains(p.NICs, pf) {
					why = append(why, fmt.Sprintf("VF %s of %s, plan's NICs %v", vf, pf, p.NICs))
				}
			}
		}
		if len(why) > 0 {
			notFollowed[ps.name] = strings.Join(why, "; ")
		}
	}
	return notFollowed
}

// pfOf is the RDMA device of a VF's PF.
func (n *node) pfOf(vf string) string {
	for _, nic := range n.topo.NICs {
		if slices.Contains(nic.VFs, vf) {
			return nic.Name
		}
	}
	return ""
}

// finishInit ends a pod's init container once the fake runtime runs it.
func (e *env) finishInit(t *testing.T, pod, container string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		p := e.pod(t, pod)
		for _, st := range p.Status.InitContainerStatuses {
			if st.Name == container && st.State.Terminated != nil {
				return
			}
		}
		if n, ok := e.nodes[p.Spec.NodeName]; ok && n.kubelet.ExitContainer("default", pod, container) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("init container %s of %s never ran", container, pod)
}

// TestRealKubeletPlansFollowed: every planned pod of the burst gets exactly
// its plan from the real device manager, and the exporter observes it so.
func TestRealKubeletPlansFollowed(t *testing.T) {
	e := startEnv(t, burstNodes(nil)...)
	if nf := runBurst(t, e); len(nf) > 0 {
		var answers []string
		for name, n := range e.nodes {
			answers = append(answers, name+": "+n.proxyAnswers())
		}
		for _, ps := range burst {
			pod := e.pod(t, ps.name)
			n := e.nodes[pod.Spec.NodeName]
			answers = append(answers, fmt.Sprintf("\n  %s on %s: plan %s, holds %v", ps.name, pod.Spec.NodeName, pod.Annotations["nicaffinity.io/allocation"], n.held(n.snapshot(), ps.name, gpuRes)))
		}
		t.Errorf("plans not followed: %v (the proxies' answers: %s)", nf, strings.Join(answers, "; "))
	}
	for _, ps := range burst {
		if ps.scheduler != "" {
			continue
		}
		if o := e.observed(t, ps.name); o.Plan != "matched" {
			t.Errorf("%s: exporter observed %+v, want the plan matched", ps.name, o)
		}
		// The proxy's NCCL_IB_HCA reaches the container through the
		// kubelet, in the exact-match form, naming the plan's NICs.
		if !ps.rdma {
			continue
		}
		pod := e.pod(t, ps.name)
		env := e.nodes[pod.Spec.NodeName].kubelet.Env("default", ps.name, "train")
		var want []string
		for _, nic := range plan(t, pod).NICs {
			want = append(want, nic+":1")
		}
		if got := env["NCCL_IB_HCA"]; got != "="+strings.Join(want, ",") {
			t.Errorf("%s: the container's NCCL_IB_HCA is %q, want %q (env %v)", ps.name, got, "="+strings.Join(want, ","), env)
		}
	}
}

// TestRealKubeletPlanLookupOff is the negative of the burst: with the
// proxy's plan lookup switched off, the vendor chooses, and plans are not
// all followed. It shows that the burst test can fail.
func TestRealKubeletPlanLookupOff(t *testing.T) {
	e := startEnv(t, burstNodes(func(c *allocproxy.Config) { c.PlanLookupOff = true })...)
	nf := runBurst(t, e)
	if len(nf) == 0 {
		t.Fatal("with the plan lookup off every plan was still followed: the burst cannot tell a following proxy from a blind one")
	}
	t.Logf("plans not followed without the lookup, as expected: %v", nf)
}
