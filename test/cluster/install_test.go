//go:build cluster

package cluster

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nicaffinity/nicaffinity/internal/images"
	"github.com/nicaffinity/nicaffinity/pkg/doctor"
	"github.com/nicaffinity/nicaffinity/pkg/kubectlplugin"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// TestClusterInstall: the chart, installed by helm with the images built
// here and only the values a cluster of this kind needs, runs every pod
// Running and Ready on a real cluster: the admission policies and Pod
// Security admit them; each node's NodeResourceTopology, as `kubectl
// nicaffinity topo` prints it, has the GPU-NIC levels `nicaffinity topo
// --machine` gives for its shape; doctor cluster passes.
func TestClusterInstall(t *testing.T) {
	e := startEnv(t)
	e.install()
	for i, s := range nodeShapes {
		topo, err := machines.Load(s.Machine)
		if err != nil {
			t.Fatal(err)
		}
		want := topoLevels(topo.Matrix())
		var got map[string]string
		var text string
		err = wait.PollUntilContextTimeout(context.Background(), time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
			out, err := e.kubectlNicaffinity("topo", s.Name, "-o", "json")
			if err != nil {
				return false, nil
			}
			m, err := decodeMatrix(out)
			if err != nil {
				return false, nil
			}
			got = kubectlLevels(m)
			text, _ = e.kubectlNicaffinity("topo", s.Name)
			return cmp.Equal(want, got), nil
		})
		if err != nil {
			t.Errorf("node %s (%s): its object's GPU-NIC levels differ from nicaffinity topo --machine (-want,+got):\n%s", e.c.Nodes[i].Spec.Name, s.Machine, cmp.Diff(want, got))
		}
		if !strings.Contains(text, "GPU0") {
			t.Errorf("kubectl nicaffinity topo %s printed no matrix:\n%s", s.Name, text)
		}
	}
	// The scheduler's pods run under the restricted Pod Security level of
	// their namespace, which the chart labels so.
	nsObj, err := e.c.Kube.CoreV1().Namespaces().Get(context.Background(), schedNS, metav1.GetOptions{})
	if err != nil || nsObj.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("namespace %s: %v, labels %v; want pod-security enforce=restricted", schedNS, err, nsObj.Labels)
	}
	r, err := e.doctorCluster()
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() {
		t.Errorf("doctor cluster fails at %s: %+v", r.FailedLayer, r.Checks)
	}
}

// kubectlNicaffinity runs the kubectl plugin in this process, against the
// cluster through its network namespace.
func (e *env) kubectlNicaffinity(args ...string) (string, error) {
	cmd := kubectlplugin.NewCommand(&kubectlplugin.Options{RESTConfig: e.c.Config})
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func (e *env) doctorCluster() (doctor.Report, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clients, err := doctor.NewClients(e.c.Config, "", 30*time.Second)
	if err != nil {
		return doctor.Report{}, err
	}
	s, err := doctor.GatherCluster(ctx, clients, doctor.DefaultClusterOptions())
	if err != nil {
		return doctor.Report{}, err
	}
	return doctor.Cluster(s, doctor.DefaultClusterOptions()), nil
}

// topoLevels are a machine's GPU-NIC levels, "GPU bus ID NIC" -> level.
func topoLevels(m *topology.Matrix) map[string]string {
	out := map[string]string{}
	for i, d := range m.Devices {
		if !d.IsGPU() {
			continue
		}
		for j, n := range m.Devices {
			if !n.IsGPU() {
				out[d.BusID+" "+n.Name] = m.Cells[i][j].String()
			}
		}
	}
	return out
}

func kubectlLevels(m *kubectlplugin.Matrix) map[string]string {
	out := map[string]string{}
	for _, g := range m.GPUs {
		for j, n := range m.NICs {
			if j < len(g.ToNICs) {
				out[g.BusID+" "+n.Name] = g.ToNICs[j]
			}
		}
	}
	return out
}

func decodeMatrix(s string) (*kubectlplugin.Matrix, error) {
	var m kubectlplugin.Matrix
	return &m, json.Unmarshal([]byte(s), &m)
}

// TestClusterImages: the archives make images wrote, as the nodes imported
// them, are the recipe's: the entrypoint is the binary, at /<name>, the
// user the manifests run it as, and the exporter's C library and loader
// from Debian's libc6 (a cgo binary on a scratch base runs only with them).
func TestClusterImages(t *testing.T) {
	dir := os.Getenv(imagesEnv)
	if dir == "" {
		t.Fatalf("$%s is not set: make test-cluster builds the images and sets it", imagesEnv)
	}
	for _, want := range images.Shipped {
		img, ref, err := images.ReadArchive(filepath.Join(dir, want.Name+".tar"), t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(ref, "/"+want.Name+":") || len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != want.Entrypoint() || cf.Config.User != want.User {
			t.Errorf("%s: name %q, entrypoint %v, user %q; want %s, %q", want.Name, ref, cf.Config.Entrypoint, cf.Config.User, want.Entrypoint(), want.User)
		}
		files := map[string]bool{}
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range layers {
			rc, err := l.Uncompressed()
			if err != nil {
				t.Fatal(err)
			}
			tr := tar.NewReader(rc)
			for h, err := tr.Next(); err == nil; h, err = tr.Next() {
				files[h.Name] = true
			}
			rc.Close()
		}
		wantFiles := []string{want.Name, "etc/passwd"}
		if want.CGO {
			wantFiles = append(wantFiles, "lib64/ld-linux-x86-64.so.2", "lib/x86_64-linux-gnu/libc.so.6")
		}
		for _, f := range wantFiles {
			if !files[f] {
				t.Errorf("%s: the image has no %s", want.Name, f)
			}
		}
	}
}
