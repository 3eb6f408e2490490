//go:build cluster

// Package cluster runs nicaffinity as a user installs it: the images
// `make images` built, the chart installed by the real helm CLI, on a real
// cluster of two nodes with containerd and runc (internal/realcluster),
// whose GPUs and NICs are catalogue machine shapes served by a stand-in
// vendor device plugin in a real container. make test-cluster runs it as
// root.
package cluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nicaffinity/nicaffinity/internal/images"
	"github.com/nicaffinity/nicaffinity/internal/realcluster"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
)

// imagesEnv names make images' output directory; make test-cluster sets it.
const imagesEnv = "NICAFFINITY_IMAGES"

// standinRef and pauseRef are the test-only images built here.
const (
	standinRef = "nicaffinity.test/device-plugin-standin:test"
	pauseRef   = "registry.k8s.io/pause:3.10.1"
)

// The nodes: an HGX H100, whose every GPU has a NIC at PIX, and an H20
// with SR-IOV VFs on two NICs.
var nodeShapes = []struct{ name, machine string }{
	{"gpu-a", "hgx-h100-8gpu-8nic"},
	{"gpu-b", "h20-3e-8gpu-11nic-sriov"},
}

type env struct {
	t   *testing.T
	c   *realcluster.Cluster
	tag string
}

// testImages builds the sandbox image and the stand-in vendor plugin's
// image with the shipped images' recipe.
func testImages(t *testing.T, dir string) []string {
	t.Helper()
	bin, err := realcluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	b := images.Build{BinDir: filepath.Join(dir, "bin"), LibcTar: filepath.Join(dir, "libc6.tar"), LibcVersion: "test", Version: "test", Created: time.Unix(0, 0)}
	var out []string
	for _, x := range []struct {
		img images.Image
		ref string
		bin string
	}{
		{images.Image{Name: "pause", User: images.NonRoot}, pauseRef, bin},
		{images.Image{Name: "device-plugin-standin", CGO: true}, standinRef, ""},
	} {
		bb := b
		if x.bin != "" {
			bb.BinDir = x.bin
		}
		img, err := bb.Image(x.img)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := name.NewTag(x.ref)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), x.img.Name+".tar")
		if err := images.WriteArchive(path, ref, img); err != nil {
			t.Fatal(err)
		}
		out = append(out, path)
	}
	return out
}

func startEnv(t *testing.T) *env {
	t.Helper()
	if err := realcluster.Check(); err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv(imagesEnv)
	if dir == "" {
		t.Fatalf("$%s is not set: make test-cluster builds the images and sets it", imagesEnv)
	}
	// The tag the chart is installed with is the one make images gave
	// the archives.
	_, ref, err := images.ReadArchive(filepath.Join(dir, "scheduler.tar"), t.TempDir())
	if err != nil {
		t.Fatalf("the scheduler's image archive: %v (make images writes it)", err)
	}
	tag := ref[strings.LastIndex(ref, ":")+1:]
	archives := testImages(t, dir)
	for _, i := range images.Shipped {
		archives = append(archives, filepath.Join(dir, i.Name+".tar"))
	}
	var nodes []realcluster.NodeSpec
	for _, s := range nodeShapes {
		m, ok := machines.Lookup(s.machine)
		if !ok {
			t.Fatalf("no machine %s", s.machine)
		}
		nodes = append(nodes, realcluster.NodeSpec{Name: s.name, Labels: map[string]string{"nvidia.com/gpu.present": "true"},
			Prepare: func(d string) error {
				tree := machines.New(d)
				m.Build(tree)
				return tree.Err()
			}})
	}
	before := realcluster.HostState()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	c, err := realcluster.Start(ctx, realcluster.Options{Nodes: nodes, Images: archives, FeatureGates: "GenericWorkload=true", PodGroupAPI: true, Keep: os.Getenv("NICAFFINITY_CLUSTER_KEEP") != ""})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster of %d nodes up in %v (%s)", len(nodes), time.Since(start).Round(time.Millisecond), c.Dir)
	e := &env{t: t, c: c, tag: tag}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range []string{"kube-apiserver", "kube-scheduler", "kube-controller-manager"} {
				t.Logf("--- %s:\n%s", n, c.Log(n, 20))
			}
			for _, n := range c.Nodes {
				t.Logf("--- node %s:\n%s", n.Spec.Name, c.Log("node-"+n.Spec.Name, 30))
				t.Logf("--- containerd %s:\n%s", n.Spec.Name, c.Log("containerd-"+n.Spec.Name, 20))
			}
			t.Logf("--- pods:\n%s", e.kubectl("get", "pods", "-A", "-o", "wide"))
		}
		c.Close()
		// The host is left as it was: every test checks it.
		if diff := cmp.Diff(before, realcluster.HostState()); diff != "" {
			t.Errorf("the cluster changed the host (-before,+after):\n%s", diff)
		}
	})
	return e
}

// run runs a command in the cluster's namespaces and returns its output.
func (e *env) run(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := e.c.Command(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func (e *env) kubectl(args ...string) string {
	out, err := e.run("kubectl", args...)
	if err != nil {
		return fmt.Sprintf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// chart is charts/nicaffinity in this checkout.
func chart(t *testing.T) string {
	p, err := filepath.Abs(filepath.Join("..", "..", "charts", "nicaffinity"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// clusterValues are the values a real cluster of this kind needs beyond
// the chart's defaults; the README's Deploy section names each.
func (e *env) clusterValues() []string {
	return []string{
		"--set", "image.tag=" + e.tag,
		// No NVIDIA container runtime here.
		"--set", "exporter.runtimeClassName=null",
		// GPUs are simulated: the nodes' sysfs trees.
		"--set", "sysfsRoot=" + realcluster.MachineDir,
		"--set", "allocationProxy.enabled=true",
	}
}

func (e *env) helm(args ...string) {
	e.t.Helper()
	out, err := e.run("helm", args...)
	if err != nil {
		e.t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// waitPodsReady waits until every pod in ns is Running and Ready.
func (e *env) waitPodsReady(ns string, want int, timeout time.Duration) []corev1.Pod {
	e.t.Helper()
	var pods []corev1.Pod
	var why, failing string
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		if err := e.c.Healthy(); err != nil {
			return false, err
		}
		l, err := e.c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			why = err.Error()
			return false, nil
		}
		pods = l.Items
		if len(pods) < want {
			why = fmt.Sprintf("%d pods, want %d", len(pods), want)
			return false, nil
		}
		for _, p := range pods {
			if p.Status.Phase != corev1.PodRunning || !podReady(&p) {
				why = fmt.Sprintf("pod %s is %s", p.Name, p.Status.Phase)
				failing = p.Name
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		detail := e.kubectl("get", "pods", "-n", ns, "-o", "wide")
		if failing != "" {
			detail += "\n" + e.kubectl("describe", "pod", "-n", ns, failing)
		}
		e.t.Fatalf("namespace %s: pods not Running and Ready: %s (%v)\n%s", ns, why, err, detail)
	}
	return pods
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Namespaces of the chart (its defaults) and of the stand-in plugin.
const (
	schedNS   = "nicaffinity-system"
	nodeNS    = "nicaffinity-node"
	vendorNS  = "vendor-standin"
	vendorDir = "/var/lib/nicaffinity/device-plugins" // the chart's allocationProxy.vendorDir
)

// vendorManifest is the stand-in vendor device plugin's DaemonSet: GPUs
// and VFs register with the allocation proxy (vendorDir), RDMA with the
// kubelet, as the NVIDIA, SR-IOV and RDMA shared plugins would once
// pointed at the proxy (docs/allocation-proxy.md).
func vendorManifest(toKubelet bool) string {
	dir := vendorDir
	if toKubelet {
		dir = "/var/lib/kubelet/device-plugins"
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
  labels:
    pod-security.kubernetes.io/enforce: privileged
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: device-plugin-standin
  namespace: %[1]s
spec:
  selector:
    matchLabels: {app: device-plugin-standin}
  template:
    metadata:
      labels: {app: device-plugin-standin}
    spec:
      nodeSelector: {nvidia.com/gpu.present: "true"}
      containers:
      - name: plugin
        image: %[2]s
        imagePullPolicy: Never
        args: ["--sysfs-root=/host/sys", "--vendor-dir=%[3]s"]
        volumeMounts:
        - {name: kubelet, mountPath: /var/lib/kubelet/device-plugins}
        - {name: vendor, mountPath: %[4]s}
        - {name: sys, mountPath: /host/sys, readOnly: true}
      volumes:
      - name: kubelet
        hostPath: {path: /var/lib/kubelet/device-plugins, type: Directory}
      - name: vendor
        hostPath: {path: %[4]s, type: DirectoryOrCreate}
      - name: sys
        hostPath: {path: %[5]s, type: Directory}
`, vendorNS, standinRef, dir, vendorDir, realcluster.MachineDir)
}

// apply applies a manifest with kubectl.
func (e *env) apply(manifest string) {
	e.t.Helper()
	f := filepath.Join(e.t.TempDir(), "m.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o600); err != nil {
		e.t.Fatal(err)
	}
	if out, err := e.run("kubectl", "apply", "-f", f); err != nil {
		e.t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
}

// install installs the chart as a user would, with the values this kind
// of cluster needs, and the stand-in vendor plugin; it waits until every
// pod of both is Running and Ready.
func (e *env) install(extra ...string) {
	e.t.Helper()
	e.helm(append(append([]string{"install", "nicaffinity", chart(e.t)}, e.clusterValues()...), extra...)...)
	e.apply(vendorManifest(false))
	e.waitPodsReady(vendorNS, len(e.c.Nodes), 3*time.Minute)
	e.waitPodsReady(nodeNS, 2*len(e.c.Nodes), 3*time.Minute)
	e.waitPodsReady(schedNS, 2, 3*time.Minute)
}

// installWithoutProxy installs the chart with the allocation proxy off,
// the vendor plugin registering with the kubelet itself.
func (e *env) installWithoutProxy() {
	e.t.Helper()
	e.helm(append(append([]string{"install", "nicaffinity", chart(e.t)}, e.clusterValues()...), "--set", "allocationProxy.enabled=false")...)
	e.apply(vendorManifest(true))
	e.waitPodsReady(vendorNS, len(e.c.Nodes), 3*time.Minute)
	e.waitPodsReady(nodeNS, len(e.c.Nodes), 3*time.Minute)
	e.waitPodsReady(schedNS, 2, 3*time.Minute)
}
