package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	"sigs.k8s.io/yaml"

	"github.com/nicaffinity/nicaffinity/internal/podresourcessim"
	"github.com/nicaffinity/nicaffinity/pkg/apis/config"
	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
)

// TestNoPublish is what a user checking a node by hand runs: the object as
// YAML on stdout, read from a sysfs tree and a (test) kubelet socket.
func TestNoPublish(t *testing.T) {
	tree := machines.New(t.TempDir())
	machines.DGXA100(tree)
	if err := tree.Err(); err != nil {
		t.Fatal(err)
	}
	kubelet := podresourcessim.New(filepath.Join(t.TempDir(), "kubelet.sock"))
	kubelet.SetAllocatable([]devices.Device{{Resource: "nvidia.com/gpu", ID: "0000:07:00.0"}})
	if err := kubelet.Start(); err != nil {
		t.Fatal(err)
	}
	defer kubelet.Stop()
	var out bytes.Buffer
	cmd := commandFor(&options{out: &out})
	cmd.SetArgs([]string{"--node-name=dgx1", "--sysfs-root=" + tree.Root, "--podresources-socket=" + kubelet.Socket,
		"--no-publish", "--nvml=off", "--kubelet-config=" + filepath.Join(t.TempDir(), "absent.yaml")})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	var obj v1alpha2.NodeResourceTopology
	if err := yaml.UnmarshalStrict(out.Bytes(), &obj); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if obj.Name != "dgx1" || len(obj.Zones) == 0 {
		t.Fatalf("object %+v", obj)
	}
	if !strings.Contains(out.String(), "name: nic-mlx5_8") || !strings.Contains(out.String(), "name: gpu-7") {
		t.Errorf("zones missing:\n%s", out.String())
	}
}

func TestBadFlags(t *testing.T) {
	for args, want := range map[string]string{
		"--nvml=sometimes":   "--nvml",
		"--max-level=near":   "--max-level",
		"--resync-period=0s": "must be positive",
		"--node-name=":       "--node-name",
		"--rails=mlx5_0":     `--rails: rails entry "mlx5_0"`,
		"--rails=mlx5_0=a b": "--rails",
		"--rail-source=lldp": `--rail-source: rail source "lldp"`,
	} {
		cmd := newCommand()
		base := []string{"--node-name=n", "--no-publish"}
		cmd.SetArgs(append(base, args))
		err := cmd.ExecuteContext(context.Background())
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error = %v, want %q", args, err, want)
		}
	}
}

// TestKubeletTopologyManager reads the policy and scope the way the kubelet
// would take them; anything else is the kubelet's default.
func TestKubeletTopologyManager(t *testing.T) {
	tests := []struct {
		name, content         string
		wantPolicy, wantScope string
	}{
		{"single-numa-node, pod", "kind: KubeletConfiguration\ntopologyManagerPolicy: single-numa-node\ntopologyManagerScope: pod\n", "single-numa-node", "pod"},
		{"policy only", "topologyManagerPolicy: restricted\n", "restricted", "container"},
		{"unset", "kind: KubeletConfiguration\n", "none", "container"},
		{"unknown values", "topologyManagerPolicy: fastest\ntopologyManagerScope: cluster\n", "none", "container"},
		{"not YAML", "topologyManagerPolicy: [\n", "none", "container"},
		{"over the size cap", "topologyManagerPolicy: single-numa-node\n#" + strings.Repeat("x", maxKubeletConfig), "none", "container"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			policy, scope := kubeletTopologyManager(path)
			if policy != tc.wantPolicy || scope != tc.wantScope {
				t.Errorf("got %s/%s, want %s/%s", policy, scope, tc.wantPolicy, tc.wantScope)
			}
		})
	}
	if policy, scope := kubeletTopologyManager(filepath.Join(t.TempDir(), "absent.yaml")); policy != "none" || scope != "container" {
		t.Errorf("absent file: %s/%s, want none/container", policy, scope)
	}
}

// TestFlagDefaults: the exporter's level and resource names default to
// pkg/apis/config's.
func TestFlagDefaults(t *testing.T) {
	f := newCommand().Flags()
	for flag, want := range map[string]string{
		"max-level":       config.DefaultMaxLevel,
		"gpu-resource":    config.DefaultGPUResourceName,
		"rdma-prefixes":   "[" + strings.Join(config.DefaultRDMAResourcePrefixes(), ",") + "]",
		"sriov-resources": "[" + strings.Join(config.DefaultSRIOVResourceNames(), ",") + "]",
	} {
		if got := f.Lookup(flag).DefValue; got != want {
			t.Errorf("--%s defaults to %s; pkg/apis/config says %s", flag, got, want)
		}
	}
}
