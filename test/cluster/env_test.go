//go:build cluster

// Package cluster runs nicaffinity as a user installs it: the images
// `make images` built, the chart installed by the real helm CLI, on a real
// cluster of two nodes with containerd and runc (internal/realcluster),
// whose GPUs and NICs are catalogue machine shapes served by a stand-in
// vendor device plugin in a real container. make test-cluster runs it as
// root.
package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/kubectl/pkg/util/podutils"

	"github.com/nicaffinity/nicaffinity/internal/clusterinstall"
	"github.com/nicaffinity/nicaffinity/internal/realcluster"
)

// imagesEnv names make images' output directory; make test-cluster sets it.
const imagesEnv = "NICAFFINITY_IMAGES"

const (
	standinRef = clusterinstall.StandinRef
	pauseRef   = clusterinstall.PauseRef
	schedNS    = clusterinstall.SchedulerNS
	nodeNS     = clusterinstall.NodeNS
	vendorNS   = clusterinstall.VendorNS
)

// nodeShapes are the cluster's nodes.
var nodeShapes = clusterinstall.Shapes

type env struct {
	t   *testing.T
	c   *realcluster.Cluster
	tag string
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
	bin, err := realcluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	archives, tag, err := clusterinstall.Images(dir, bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := clusterinstall.Nodes()
	if err != nil {
		t.Fatal(err)
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
	return clusterinstall.Run(ctx, e.c, name, args...)
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
// the chart's defaults (clusterinstall.Values).
func (e *env) clusterValues() []string { return clusterinstall.Values(e.tag) }

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
			if p.Status.Phase != corev1.PodRunning || !podutils.IsPodReady(&p) {
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

func vendorManifest(toKubelet bool) string { return clusterinstall.VendorManifest(toKubelet) }

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
