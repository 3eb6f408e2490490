package integration

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nicaffinity/nicaffinity/internal/controlplane"
	"github.com/nicaffinity/nicaffinity/pkg/doctor"
	"github.com/nicaffinity/nicaffinity/pkg/podgroupapi"
)

// TestSchedulerWithoutPodGroupAPI: on an apiserver with the default API
// set of 1.37 (no scheduling.k8s.io/v1beta1), the scheduler binary with
// the chart's configuration and feature gates (GenericWorkload on) still
// places pods: it turns the gate off, says so in its log, and doctor
// cluster names the missing API and the fix. Before, its PodGroup
// informer never synced and no pod was ever placed.
func TestSchedulerWithoutPodGroupAPI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := schedulerBinary(t, dir)
	cp := controlplane.Start(t)
	ctx := context.Background()
	if served, err := podgroupapi.Served(cp.Kube.Discovery()); err != nil || served {
		t.Fatalf("the default control plane serves PodGroups (%v, %v): the test needs one that does not", served, err)
	}
	cfgPath := schedulerSetup(t, cp, dir, nil)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	// The chart's command line: its feature gates included.
	log := &syncBuffer{}
	cmd := exec.Command(bin, "--config="+cfgPath, "--feature-gates=GenericWorkload=true", "--secure-port=0", "--v=2")
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	e := &env{cp: cp}
	e.submit(t, "first", 1, podOpts{scheduler: "nicaffinity-scheduler", rdma: true})
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		return e.pod(t, "first").Spec.NodeName != "", nil
	}); err != nil {
		t.Fatalf("the pod was not placed without the PodGroup API: %v\nscheduler log:\n%s", err, tail(log.String(), 30))
	}
	if !strings.Contains(log.String(), "Running without gangs") {
		t.Errorf("the scheduler's log does not say it runs without gangs:\n%s", tail(log.String(), 30))
	}
	r := runDoctorBinary(t, buildNicaffinity(t), kubeconfig, "cluster")
	found := false
	for _, c := range r.Checks {
		if c.Name == "PodGroup API" && c.Status == doctor.Warn && strings.Contains(c.Detail, podgroupapi.GroupVersion) && strings.Contains(c.Fix, "--runtime-config=scheduling.k8s.io/v1beta1=true") {
			found = true
		}
	}
	if !found {
		t.Errorf("doctor cluster does not warn of the missing PodGroup API with its fix: %+v", r.Checks)
	}
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
