package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nicaffinity/nicaffinity/internal/controlplane"
	"github.com/nicaffinity/nicaffinity/internal/podresourcessim"
	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// exporterBinary builds cmd/topology-exporter as the images do (see
// images/topology-exporter.Dockerfile: the grpcnotrace tag).
func exporterBinary(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "topology-exporter")
	build := exec.Command("go", "build", "-tags", "grpcnotrace", "-o", bin, "github.com/nicaffinity/nicaffinity/cmd/topology-exporter")
	build.Env = append(os.Environ(), "CGO_CFLAGS=-Wno-deprecated-declarations")
	if out, err := build.CombinedOutput(); err != nil {
		tb.Fatalf("building the exporter: %v\n%s", err, out)
	}
	return bin
}

// runningExporter is the built exporter, running as the DaemonSet would
// (flags, kubeconfig, metrics endpoint) against the in-process apiserver,
// on an 8-GPU, 8-NIC node (HGX H100) whose object it has published and
// whose /readyz answers 200.
type runningExporter struct {
	cmd         *exec.Cmd
	metricsAddr string
}

func startExporterBinary(tb testing.TB, cp *controlplane.ControlPlane, bin string) *runningExporter {
	tb.Helper()
	dir := tb.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		tb.Fatal(err)
	}
	sysRoot := filepath.Join(dir, "sys")
	topo, err := machines.Discover(sysRoot, machines.HGXH100)
	if err != nil {
		tb.Fatal(err)
	}
	kubelet := podresourcessim.New(filepath.Join(dir, "kubelet.sock"))
	var offered []devices.Device
	for _, g := range topo.GPUs {
		offered = append(offered, devices.Device{Resource: "nvidia.com/gpu", ID: g.PCI.Address, NUMANodes: []int{topology.NUMAOf(g.PCI)}})
	}
	kubelet.SetAllocatable(offered)
	if err := kubelet.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(kubelet.Stop)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	metricsAddr := l.Addr().String()
	l.Close()

	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--node-name="+node, "--sysfs-root="+sysRoot, "--podresources-socket="+kubelet.Socket,
		"--kubeconfig="+kubeconfig, "--metrics-bind-address="+metricsAddr, "--nvml=off", "--kubelet-config="+filepath.Join(dir, "none"), "-v=1")
	cmd.Stderr = &prefixWriter{tb: tb}
	cmd.Env = append(os.Environ(), os.Getenv("EXPORTER_ENV"))
	if err := cmd.Start(); err != nil {
		cancel()
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cancel(); _ = cmd.Wait() })

	env := &exporterEnv{cp: cp}
	env.waitNRT(tb, "the binary's object", func(o *v1alpha2.NodeResourceTopology) bool {
		return zoneRes(o, "node-1", "nvidia.com/gpu") == "4/4/4"
	})
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, err := http.Get("http://" + metricsAddr + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		tb.Fatalf("/readyz never answered 200: %v", err)
	}
	return &runningExporter{cmd: cmd, metricsAddr: metricsAddr}
}

// TestExporterBinary runs the built exporter and reads its metrics.
func TestExporterBinary(t *testing.T) {
	cp := controlplane.Start(t)
	exp := startExporterBinary(t, cp, exporterBinary(t))
	resp, err := http.Get("http://" + exp.metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var body strings.Builder
	_, _ = fmt.Fprint(&body, readAll(resp))
	if !strings.Contains(body.String(), `nicaffinity_exporter_publishes_total{result="written"} 1`) {
		t.Errorf("metrics lack one written publish:\n%s", grep(body.String(), "nicaffinity_"))
	}
}

// BenchmarkExporterRSS reports the built exporter's resident memory once it
// has published an 8-GPU, 8-NIC node and settled (docs/exporter.md,
// Footprint): RSS-MiB (VmRSS), peak-MiB (VmHWM), anon-MiB and file-MiB.
// Each iteration starts a fresh process; run with -benchtime=1x -count=N.
// Most of the RSS is the binary's own pages: its size is what to watch.
func BenchmarkExporterRSS(b *testing.B) {
	cp := controlplane.Start(b)
	bin := exporterBinary(b)
	var rss, hwm, anon, file float64
	for b.Loop() {
		if err := cp.NRT.TopologyV1alpha2().NodeResourceTopologies().Delete(context.Background(), node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			b.Fatal(err)
		}
		exp := startExporterBinary(b, cp, bin)
		time.Sleep(2 * time.Second) // settle, then read
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", exp.cmd.Process.Pid))
		if err != nil {
			b.Fatal(err)
		}
		rss = max(rss, statusMiB(b, status, "VmRSS"))
		hwm = max(hwm, statusMiB(b, status, "VmHWM"))
		anon = max(anon, statusMiB(b, status, "RssAnon"))
		file = max(file, statusMiB(b, status, "RssFile"))
		_ = exp.cmd.Process.Kill()
		_ = exp.cmd.Wait()
	}
	b.ReportMetric(rss, "RSS-MiB")
	b.ReportMetric(hwm, "peak-MiB")
	b.ReportMetric(anon, "anon-MiB")
	b.ReportMetric(file, "file-MiB")
}

// statusMiB reads a "Key:   1234 kB" line of /proc/PID/status, in MiB.
func statusMiB(tb testing.TB, status []byte, key string) float64 {
	tb.Helper()
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, key+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				tb.Fatalf("/proc status %q: %v", line, err)
			}
			return kb / 1024
		}
	}
	tb.Fatalf("/proc status has no %s", key)
	return 0
}

func readAll(resp *http.Response) string {
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32*1024)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

func grep(text, substr string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, substr) && !strings.HasPrefix(line, "#") {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return strings.Join(out, "; ")
}

// prefixWriter sends the binary's log to the test log.
type prefixWriter struct{ tb testing.TB }

func (w *prefixWriter) Write(p []byte) (int, error) {
	w.tb.Logf("exporter: %s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
