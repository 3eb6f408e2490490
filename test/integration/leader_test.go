package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nicaffinity/nicaffinity/internal/cluster"
	"github.com/nicaffinity/nicaffinity/internal/controlplane"
	"github.com/nicaffinity/nicaffinity/internal/kubeletsim"
	"github.com/nicaffinity/nicaffinity/internal/schedulerrun"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	corev1 "k8s.io/api/core/v1"
)

// TestLeaderElection runs two scheduler binaries with the shipped
// configuration (leader election on, lease nicaffinity-scheduler): one
// leads and places a pod; it is killed, the other takes the lease and places
// the next pod; no pod is bound twice.
func TestLeaderElection(t *testing.T) {
	// Mostly waiting (leases, resync periods, restarts): run beside the
	// other waiting tests, each with its own control plane.
	t.Parallel()
	dir := t.TempDir()
	bin := schedulerBinary(t, dir)
	cp := controlplane.Start(t)
	// Short lease timings so the takeover fits in a test.
	cfgPath := schedulerSetup(t, cp, dir, func(cfg string) string {
		return strings.Replace(cfg, "  leaderElect: true\n", "  leaderElect: true\n  leaseDuration: 4s\n  renewDeadline: 3s\n  retryPeriod: 500ms\n", 1)
	})
	ctx := context.Background()
	procs := map[string]*exec.Cmd{}
	logs := map[string]*syncBuffer{}
	for _, id := range []string{"replica-a", "replica-b"} {
		cmd := exec.Command(bin, "--config="+cfgPath, "--secure-port=0", "--v=2")
		logs[id] = &syncBuffer{}
		cmd.Stderr = logs[id]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[id] = cmd
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	holder := func() string {
		l, err := cp.Kube.CoordinationV1().Leases("nicaffinity-system").Get(ctx, "nicaffinity-scheduler", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	var leader string
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		leader = holder()
		return leader != "", nil
	}); err != nil {
		t.Fatalf("no leader: %v", err)
	}
	e := &env{cp: cp}
	e.submit(t, "first", 1, podOpts{scheduler: "nicaffinity-scheduler", rdma: true})
	first := e.waitRunning(t, "first")

	var killed string
	_ = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		for id := range procs {
			if strings.Contains(strings.ToLower(logs[id].String()), "successfully acquired lease") {
				killed = id
			}
		}
		return killed != "", nil
	})
	if killed != "" {
		_ = procs[killed].Process.Kill()
	}
	if killed == "" {
		t.Fatalf("neither replica logged acquiring the lease held by %q:\n%s", leader, logs["replica-a"].String()[:min(3000, len(logs["replica-a"].String()))])
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		h := holder()
		return h != "" && h != leader, nil
	}); err != nil {
		t.Fatalf("nobody took over from %s: %v", killed, err)
	}
	t.Logf("leader %s (%s) killed, %s took over", killed, leader, holder())
	e.submit(t, "second", 1, podOpts{scheduler: "nicaffinity-scheduler", rdma: true})
	e.waitRunning(t, "second")
	if again := e.pod(t, "first"); again.Spec.NodeName != first.Spec.NodeName || again.UID != first.UID {
		t.Errorf("first pod changed: %s -> %s", first.Spec.NodeName, again.Spec.NodeName)
	}
}

// schedulerSetup makes what a scheduler binary needs on cp: the
// nicaffinity-system namespace, one HGX H100 node with its exporter, and
// the shipped configuration (edited by edit, when not nil) pointed at cp,
// written in dir. It returns the configuration's path.
func schedulerSetup(t *testing.T, cp *controlplane.ControlPlane, dir string, edit func(string) string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := cp.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "nicaffinity-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cluster.Start(t, cp, cluster.DefaultOptions(), cluster.NodeSpec{Name: "h100", Machine: machines.HGXH100, Policy: kubeletsim.Planned})
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	cfg, err := schedulerrun.ShippedConfig()
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		cfg = edit(cfg)
	}
	cfg = strings.Replace(cfg, "kind: KubeSchedulerConfiguration\n", "kind: KubeSchedulerConfiguration\nclientConnection:\n  kubeconfig: "+kubeconfig+"\n", 1)
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfgPath
}

// schedulerBinary builds cmd/scheduler into dir.
func schedulerBinary(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "scheduler")
	build := exec.Command("go", "build", "-o", bin, "github.com/nicaffinity/nicaffinity/cmd/scheduler")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the scheduler: %v\n%s", err, out)
	}
	return bin
}

// syncBuffer collects a process's log for reading while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
