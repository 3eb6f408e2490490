//go:build kubelet

package kubelet

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/nicaffinity/nicaffinity/internal/realkubelet"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
)

// TestRealKubeletLeavesNothing: a kubelet that registers, admits a pod,
// restarts and stops changes nothing on the host: not the paths it writes
// when nothing shadows them, nor the sysctls it sets.
func TestRealKubeletLeavesNothing(t *testing.T) {
	before := realkubelet.HostState()
	t.Run("kubelet", func(t *testing.T) {
		e := startEnv(t, nodeSpec{name: "half", machine: machines.HalfNICs})
		e.submit(t, podSpec{name: "job", gpus: 2, rdma: true})
		e.waitPhase(t, "job", corev1.PodRunning)
		if err := e.nodes["half"].kubelet.Restart(); err != nil {
			t.Fatal(err)
		}
		e.nodes["half"].waitDevices(gpuRes, 8)
		e.delete(t, "job")
	})
	if diff := cmp.Diff(before, realkubelet.HostState()); diff != "" {
		t.Errorf("the host changed while a kubelet ran (-before,+after):\n%s", diff)
	}
}
