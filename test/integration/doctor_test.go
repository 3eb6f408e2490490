package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/utils/ptr"

	"github.com/nicaffinity/nicaffinity/internal/cluster"
	"github.com/nicaffinity/nicaffinity/internal/kubeletsim"
	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/doctor"
	"github.com/nicaffinity/nicaffinity/pkg/kubectlplugin"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/machines/machinestest"
)

// TestE2EGPUDirectACS: an HGX H100 node with ACS redirect between GPU 0 and
// its PIX NIC. A pod that requires every GPU with GPUDirect RDMA (policy
// required: under the default, bounded, no node could align it, so it would
// not wait) stays Pending, and the scheduler's reason names the bridge; doctor pod says so
// too. Once ACS is off (the tree changes as setpci would change it) the
// exporter republishes, the pod is placed and observed aligned. doctor
// cluster and doctor pod, the built binary, run against the control plane
// throughout.
func TestE2EGPUDirectACS(t *testing.T) {
	nicaffinity := buildNicaffinity(t)
	var tree *machines.Tree
	opts := cluster.DefaultOptions()
	opts.ResyncPeriod = 500 * time.Millisecond
	opts.MinWriteInterval = 100 * time.Millisecond
	e := startEnvWith(t, opts, cluster.NodeSpec{Name: "acs", Policy: kubeletsim.BestEffort, Machine: func(tr *machines.Tree) {
		machinestest.ReadyHGXH100("acs-redirect")(tr)
		tree = tr
	}})
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := e.cp.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	port := tree.BridgeAbove(tree.GPUAddresses()[0])

	placedBefore := schedulerMetric(t, "nicaffinity_scheduler_placements_total", "profile", "nicaffinity-scheduler", "level", "PIX", "policy", "required")
	blockedBefore := schedulerMetric(t, "nicaffinity_scheduler_filter_rejections_total", "profile", "nicaffinity-scheduler", "reason", "gpudirect_impossible")
	e.submit(t, "whole", 8, podOpts{scheduler: "nicaffinity-scheduler", rdma: true, ann: map[string]string{annotations.Policy: annotations.PolicyRequired}})
	if msg := waitFailedScheduling(t, e.cp, "whole"); !strings.Contains(msg, "only 7 of the 8 free GPUs have a NIC at PXB or closer") || !strings.Contains(msg, "ACS redirect on "+port) {
		t.Fatalf("FailedScheduling = %q, want the ACS redirect on %s named", msg, port)
	}
	// kubectl nicaffinity, in-process on the same control plane.
	if out := kubectlNicaffinity(t, e, "why", "whole"); !strings.Contains(out, "default/whole is Pending.") ||
		!strings.Contains(out, "ACS redirect on "+port) || !regexp.MustCompile(`(?m)^acs\s+8\s+7\s+only 7 of the 8 free GPUs have a NIC at PXB or closer; the pod needs 8; GPUDirect RDMA impossible on closer paths: ACS redirect on `).MatchString(out) {
		t.Errorf("kubectl nicaffinity why (Pending):\n%s", out)
	}
	if out := kubectlNicaffinity(t, e, "topo", "acs"); !strings.Contains(out, " PIX! ") || !strings.Contains(out, "GPU0-NIC0 (") || !strings.Contains(out, "ACS redirect on "+port) {
		t.Errorf("kubectl nicaffinity topo:\n%s", out)
	}
	r := runDoctorBinary(t, nicaffinity, kubeconfig, "pod", "whole")
	if r.FailedLayer != doctor.LayerPlacement || !hasCheck(r, "scheduled", doctor.Fail, "ACS redirect on "+port) {
		t.Errorf("doctor pod while Pending: %+v", r)
	}

	// doctor cluster: the exporters here run in-process, so there is no
	// DaemonSet yet: the finding is at the exporter layer.
	r = runDoctorBinary(t, nicaffinity, kubeconfig, "cluster")
	if r.FailedLayer != doctor.LayerExporter || !hasCheck(r, "exporter DaemonSet", doctor.Fail, "nicaffinity-node/topology-exporter not found") ||
		!hasCheck(r, "node acs", doctor.Pass, "rdma/hca") {
		t.Errorf("doctor cluster without the DaemonSet: %+v", r)
	}
	installStandIns(t, e)
	r = runDoctorBinary(t, nicaffinity, kubeconfig, "cluster")
	if !r.OK() || !hasCheck(r, "object of acs", doctor.Pass, "fresh, 8 GPUs") || !hasCheck(r, "scheduler leader", doctor.Pass, "sched-0") {
		t.Errorf("doctor cluster: %+v", r)
	}

	// ACS off, as setpci -s <port> ECAP_ACS+0x6.w=0000 leaves it.
	tree.ACS(port, 0)
	if err := tree.Err(); err != nil {
		t.Fatal(err)
	}
	e.waitRunning(t, "whole")
	// The scheduler's own metrics, from its registry in this process (other
	// tests run schedulers beside this one: deltas, at least).
	if d := schedulerMetric(t, "nicaffinity_scheduler_filter_rejections_total", "profile", "nicaffinity-scheduler", "reason", "gpudirect_impossible") - blockedBefore; d < 1 {
		t.Errorf("filter_rejections_total{reason=gpudirect_impossible} rose by %v, want at least 1", d)
	}
	if d := schedulerMetric(t, "nicaffinity_scheduler_placements_total", "profile", "nicaffinity-scheduler", "level", "PIX", "policy", "required") - placedBefore; d < 1 {
		t.Errorf("placements_total{level=PIX,policy=required} rose by %v, want at least 1", d)
	}
	obs := e.observed(t, "whole")
	if !obs.Aligned || len(obs.GPUDirect) != 0 || obs.Level != "PIX" {
		t.Errorf("observed %+v, want aligned at PIX with nothing blocking GPUDirect", obs)
	}
	if out := kubectlNicaffinity(t, e, "why", "whole"); !strings.Contains(out, "default/whole runs on acs.") ||
		!strings.Contains(out, "NCCL_IB_HCA: mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7") || !strings.Contains(out, "GPU-NIC alignment: worst PIX") {
		t.Errorf("kubectl nicaffinity why (placed):\n%s", out)
	}
	r = runDoctorBinary(t, nicaffinity, kubeconfig, "pod", "whole")
	// The test pod adds no IPC_LOCK: that is the finding, at the last layer.
	if r.FailedLayer != doctor.LayerPermissions || !hasCheck(r, "GPU-NIC alignment", doctor.Pass, "worst PIX") ||
		!hasCheck(r, "NCCL_IB_HCA", doctor.Info, "mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7") ||
		!hasCheck(r, "container train: IPC_LOCK", doctor.Fail, "not added") {
		t.Errorf("doctor pod once placed: %+v", r)
	}
}

// schedulerMetric reads a counter from the registry kube-scheduler serves
// (the in-process schedulers share it); labels are name, value pairs.
func schedulerMetric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metric:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue metric
				}
			}
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

func hasCheck(r doctor.Report, name string, status doctor.Status, detail string) bool {
	for _, c := range r.Checks {
		if c.Name == name && c.Status == status && strings.Contains(c.Detail, detail) {
			return true
		}
	}
	return false
}

// kubectlNicaffinity runs `kubectl nicaffinity ARGS` in this process
// against the control plane.
func kubectlNicaffinity(t *testing.T, e *env, args ...string) string {
	t.Helper()
	cmd := kubectlplugin.NewCommand(&kubectlplugin.Options{RESTConfig: e.cp.Config})
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("kubectl nicaffinity %v: %v", args, err)
	}
	t.Logf("kubectl nicaffinity %v:\n%s", args, out.String())
	return out.String()
}

// buildNicaffinity builds cmd/nicaffinity as users run it.
func buildNicaffinity(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "nicaffinity")
	build := exec.Command("go", "build", "-o", bin, "github.com/nicaffinity/nicaffinity/cmd/nicaffinity")
	build.Env = append(os.Environ(), "CGO_CFLAGS=-Wno-deprecated-declarations")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building nicaffinity: %v\n%s", err, out)
	}
	return bin
}

func runDoctorBinary(t *testing.T, bin, kubeconfig string, args ...string) doctor.Report {
	t.Helper()
	cmd := exec.Command(bin, append(append([]string{"doctor"}, args...), "--kubeconfig", kubeconfig, "-o", "json")...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var r doctor.Report
	if jerr := json.Unmarshal(stdout.Bytes(), &r); jerr != nil {
		t.Fatalf("doctor %v: %v (%v)\nstdout: %s\nstderr: %s", args, jerr, err, stdout.String(), stderr.String())
	}
	var exit *exec.ExitError
	if r.OK() != (err == nil) || err != nil && !errors.As(err, &exit) {
		t.Errorf("doctor %v: exit %v with failed layer %q", args, err, r.FailedLayer)
	}
	return r
}

// installStandIns writes what the controllers of a real install would
// show: the exporter DaemonSet with its pods ready, and the scheduler's
// leader lease (the in-process scheduler runs without leader election).
func installStandIns(t *testing.T, e *env) {
	t.Helper()
	ctx := context.Background()
	for _, ns := range []string{"nicaffinity-node", "nicaffinity-system"} {
		if _, err := e.cp.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	labels := map[string]string{"app.kubernetes.io/name": "topology-exporter"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "topology-exporter", Namespace: "nicaffinity-node"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "exporter", Image: "topology-exporter"}}},
		}},
	}
	ds, err := e.cp.Kube.AppsV1().DaemonSets("nicaffinity-node").Create(ctx, ds, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: 1, CurrentNumberScheduled: 1, NumberReady: 1, NumberAvailable: 1}
	if _, err := e.cp.Kube.AppsV1().DaemonSets("nicaffinity-node").UpdateStatus(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "nicaffinity-scheduler", Namespace: "nicaffinity-system"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("sched-0"), LeaseDurationSeconds: ptr.To[int32](15),
			RenewTime: &metav1.MicroTime{Time: time.Now()}},
	}
	if _, err := e.cp.Kube.CoordinationV1().Leases("nicaffinity-system").Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
