//go:build kubelet

package kubelet

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nicaffinity/nicaffinity/pkg/allocproxy"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
)

// followsPlan fails the test unless the kubelet lists the pod holding
// exactly its planned GPUs.
func (e *env) followsPlan(t *testing.T, name string) {
	t.Helper()
	pod := e.pod(t, name)
	n := e.nodes[pod.Spec.NodeName]
	want := slices.Clone(plan(t, pod).GPUs)
	slices.Sort(want)
	// A restarted kubelet lists a pod once it has read it back from the
	// apiserver; until then the pod is absent, which is not a holding.
	var got []string
	n.poll("pod "+name+" in podresources", 30*time.Second, func(ctx context.Context) bool {
		snap, err := n.trySnapshot(ctx)
		if err != nil {
			return false
		}
		for _, p := range snap.Pods {
			if p.Namespace == "default" && p.Name == name {
				got = n.held(snap, name, gpuRes)
				return true
			}
		}
		return false
	})
	if !slices.Equal(got, want) {
		t.Errorf("%s holds GPUs %v, plan %v (the proxy's answers: %s)", name, got, want, n.proxyAnswers())
	}
}

// noDeviceTwice fails the test if the kubelet lists one device for two
// pods.
func (n *node) noDeviceTwice(t *testing.T) {
	t.Helper()
	owner := map[string]string{}
	for _, p := range n.snapshot().Pods {
		for _, d := range p.Devices {
			if d.Resource == rdmaRes {
				continue // a shared resource's slots, not devices
			}
			key := d.Resource + "/" + d.ID
			if prev, dup := owner[key]; dup && prev != p.Name {
				t.Errorf("%s and %s both hold %s", prev, p.Name, key)
			}
			owner[key] = p.Name
		}
	}
}

// TestRealKubeletRestarts: the kubelet, the vendor plugin and the proxy
// each restart after a pod's admission (the kubelet keeps its checkpoint)
// and between another pod's binding and its admission. No pod holds
// devices other than its plan, and no device is handed out twice. On the
// half-NIC node the vendor's own choice (GPU 0 first) is never the plan.
func TestRealKubeletRestarts(t *testing.T) {
	e := startEnv(t, nodeSpec{name: "half", machine: machines.HalfNICs})
	n := e.nodes["half"]
	for _, tc := range []struct {
		name string
		// restart runs while the kubelet is paused for the
		// bind-to-admission case; the kubelet's own restart is a stop
		// before the binding and a start after it.
		restart func()
		paused  bool
		// mayFail: the kubelet's device manager takes the component's
		// registration anew, and an admission that meets it fails
		// (UnexpectedAdmissionError). A vendor restart behind the proxy
		// is no new registration to the kubelet, so it may not fail.
		mayFail bool
	}{
		{"kubelet", func() {
			if err := n.kubelet.Restart(); err != nil {
				t.Fatal(err)
			}
		}, false, true},
		{"vendor", func() { n.restartVendor(gpuRes) }, true, false},
		{"proxy", func() { n.stopProxy(); n.startProxy() }, true, true},
	} {
		t.Logf("restarting the %s", tc.name)
		admitted, pending := "admitted-"+tc.name, "pending-"+tc.name
		e.submit(t, podSpec{name: admitted, gpus: 1, rdma: true})
		e.waitPhase(t, admitted, corev1.PodRunning)
		e.followsPlan(t, admitted)

		// After admission: the kubelet keeps its checkpoint.
		tc.restart()
		n.waitDevices(gpuRes, len(n.topo.GPUs))
		// The scheduler counts from the Node object, which the kubelet
		// set to no GPUs while their plugin was gone and restores only on
		// its next status update: a kubelet paused or stopped before that
		// leaves the next pod Insufficient.
		n.waitAllocatable(gpuRes, len(n.topo.GPUs))
		e.followsPlan(t, admitted)

		// Between binding and admission. The exporter must have caught up
		// first: a paused kubelet answers it nothing.
		e.waitSynced(t, n)
		if tc.paused {
			if err := n.kubelet.Pause(); err != nil {
				t.Fatal(err)
			}
		} else {
			n.kubelet.Stop()
		}
		e.submit(t, podSpec{name: pending, gpus: 1, rdma: true})
		e.waitBound(t, pending)
		if tc.paused {
			tc.restart()
			if err := n.kubelet.Resume(); err != nil {
				t.Fatal(err)
			}
		} else if err := n.kubelet.Start(); err != nil {
			t.Fatal(err)
		}
		pod := e.waitPhase(t, pending, corev1.PodRunning, corev1.PodFailed)
		switch {
		case pod.Status.Phase == corev1.PodRunning:
			e.followsPlan(t, pending)
		case tc.mayFail && pod.Status.Reason == "UnexpectedAdmissionError":
			// The kubelet's own behaviour (docs/allocation-proxy.md): a
			// restarted kubelet admits the pods bound to it at once and
			// fails one whose device plugins have not registered again
			// yet, and a registration that replaces a resource's client
			// fails the admission using it. The pod holds nothing; its
			// controller makes another.
			t.Logf("%s, bound before the %s restart, failed admission as the kubelet fails it: %s", pending, tc.name, pod.Status.Message)
			if got := n.held(n.snapshot(), pending, gpuRes); len(got) > 0 {
				t.Errorf("%s failed admission but holds %v", pending, got)
			}
		default:
			t.Fatalf("%s, bound before the %s restart, was not admitted: %s: %s", pending, tc.name, pod.Status.Reason, pod.Status.Message)
		}
		e.followsPlan(t, admitted)
		n.noDeviceTwice(t)
		e.delete(t, admitted)
		e.delete(t, pending)
	}
}

// TestRealKubeletVendorAwayLong: the vendor plugin stays away longer than
// the proxy's --call-timeout. The front ends its ListAndWatch stream and
// the kubelet lets the resource go (no healthy GPUs), and it never dials a
// plugin again by itself: when the vendor is back, the proxy must register
// the front again for the kubelet to offer the GPUs and admit a pod.
func TestRealKubeletVendorAwayLong(t *testing.T) {
	e := startEnv(t, nodeSpec{name: "half", machine: machines.HalfNICs, proxy: func(c *allocproxy.Config) { c.CallTimeout = time.Second }})
	n := e.nodes["half"]
	n.mu.Lock()
	v := n.vendors[gpuRes]
	n.mu.Unlock()
	v.Stop()
	n.waitDevices(gpuRes, 0)
	n.startVendor(gpuRes)
	n.waitDevices(gpuRes, len(n.topo.GPUs))
	n.waitAllocatable(gpuRes, len(n.topo.GPUs))
	e.submit(t, podSpec{name: "after-away", gpus: 1, rdma: true})
	e.waitPhase(t, "after-away", corev1.PodRunning)
	e.followsPlan(t, "after-away")
}
