package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nicaffinity/nicaffinity/internal/controlplane"
	"github.com/nicaffinity/nicaffinity/internal/podresourcestest"
	"github.com/nicaffinity/nicaffinity/pkg/podresources"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
	"github.com/nicaffinity/nicaffinity/pkg/topology/sysfs/sysfstest"
)

// TestExporterBinary runs the built cmd/topology-exporter as the DaemonSet
// would (flags, kubeconfig, metrics endpoint) against the in-process apiserver
// and reports its memory on an 8-GPU, 8-NIC node.
func TestExporterBinary(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "topology-exporter")
	build := exec.Command("go", "build", "-o", bin, "github.com/nicaffinity/nicaffinity/cmd/topology-exporter")
	build.Env = append(os.Environ(), "CGO_CFLAGS=-Wno-deprecated-declarations")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the exporter: %v\n%s", err, out)
	}
	cp := controlplane.Start(t)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	sysRoot := filepath.Join(dir, "sys")
	topo, err := sysfstest.Discover(sysRoot, sysfstest.HGXH100)
	if err != nil {
		t.Fatal(err)
	}
	kubelet := podresourcestest.New(filepath.Join(dir, "kubelet.sock"))
	var offered []podresources.Device
	for _, g := range topo.GPUs {
		offered = append(offered, podresources.Device{Resource: "nvidia.com/gpu", ID: g.PCI.Address, NUMANodes: []int{topology.NUMAOf(g.PCI)}})
	}
	kubelet.SetAllocatable(offered)
	if err := kubelet.Start(); err != nil {
		t.Fatal(err)
	}
	defer kubelet.Stop()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := l.Addr().String()
	l.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--node-name="+node, "--sysfs-root="+sysRoot, "--podresources-socket="+kubelet.Socket,
		"--kubeconfig="+kubeconfig, "--metrics-bind-address="+metricsAddr, "--nvml=off", "--kubelet-config="+filepath.Join(dir, "none"), "-v=1")
	cmd.Stderr = &prefixWriter{t: t}
	cmd.Env = append(os.Environ(), os.Getenv("EXPORTER_ENV"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	env := &exporterEnv{cp: cp}
	env.waitNRT(t, "the binary's object", func(o *v1alpha2.NodeResourceTopology) bool {
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
		t.Fatalf("/readyz never answered 200: %v", err)
	}
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var body strings.Builder
	_, _ = fmt.Fprint(&body, readAll(resp))
	if !strings.Contains(body.String(), `nicaffinity_exporter_publishes_total{result="written"} 1`) {
		t.Errorf("metrics lack one written publish:\n%s", grep(body.String(), "nicaffinity_"))
	}
	time.Sleep(2 * time.Second) // settle, then read memory
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("exporter memory on an 8-GPU, 8-NIC node: %s, %s", grep(string(status), "VmRSS"), grep(string(status), "VmHWM"))
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
type prefixWriter struct{ t *testing.T }

func (w *prefixWriter) Write(p []byte) (int, error) {
	w.t.Logf("exporter: %s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
