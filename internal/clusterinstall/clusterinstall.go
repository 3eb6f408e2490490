// Package clusterinstall installs nicaffinity on a real cluster of
// simulated GPU nodes (internal/realcluster) as a user would: the images
// `make images` wrote, the chart by the real helm CLI with the values such
// a cluster needs, and a stand-in vendor device plugin in real containers.
// test/cluster and `make cluster-up` share it. Test machinery: no product
// package imports it.
package clusterinstall

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/nicaffinity/nicaffinity/internal/images"
	"github.com/nicaffinity/nicaffinity/internal/realcluster"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
)

// The test-only images built here.
const (
	StandinRef = "nicaffinity.test/device-plugin-standin:test"
	PauseRef   = "registry.k8s.io/pause:3.10.1"
)

// Namespaces of the chart (its defaults) and of the stand-in plugin, and
// the chart's allocationProxy.vendorDir.
const (
	SchedulerNS = "nicaffinity-system"
	NodeNS      = "nicaffinity-node"
	VendorNS    = "vendor-standin"
	VendorDir   = "/var/lib/nicaffinity/device-plugins"
)

// Shapes are the nodes: an HGX H100, whose every GPU has a NIC at PIX, and
// an H20 with SR-IOV VFs on two NICs.
var Shapes = []struct{ Name, Machine string }{
	{"gpu-a", "hgx-h100-8gpu-8nic"},
	{"gpu-b", "h20-3e-8gpu-11nic-sriov"},
}

// Nodes are the realcluster specs of Shapes, each with its sysfs tree and
// the label GPU feature discovery would set.
func Nodes() ([]realcluster.NodeSpec, error) {
	var nodes []realcluster.NodeSpec
	for _, s := range Shapes {
		m, ok := machines.Lookup(s.Machine)
		if !ok {
			return nil, fmt.Errorf("no machine %s in the catalogue", s.Machine)
		}
		nodes = append(nodes, realcluster.NodeSpec{Name: s.Name, Labels: map[string]string{"nvidia.com/gpu.present": "true"},
			Prepare: func(d string) error {
				tree := machines.New(d)
				m.Build(tree)
				return tree.Err()
			}})
	}
	return nodes, nil
}

// Images are the archives every node imports: the sandbox and stand-in
// images built into tmp with the shipped images' recipe, then the shipped
// images from imagesDir (make images' output), and their tag.
func Images(imagesDir, binDir, tmp string) (archives []string, tag string, err error) {
	b := images.Build{BinDir: filepath.Join(imagesDir, "bin"), LibcTar: filepath.Join(imagesDir, "libc6.tar"), LibcVersion: "test", Version: "test", Created: time.Unix(0, 0)}
	for _, x := range []struct {
		img images.Image
		ref string
		bin string
	}{
		{images.Image{Name: "pause", User: images.NonRoot}, PauseRef, binDir},
		{images.Image{Name: "device-plugin-standin", CGO: true}, StandinRef, ""},
	} {
		bb := b
		if x.bin != "" {
			bb.BinDir = x.bin
		}
		img, err := bb.Image(x.img)
		if err != nil {
			return nil, "", err
		}
		ref, err := name.NewTag(x.ref)
		if err != nil {
			return nil, "", err
		}
		path := filepath.Join(tmp, x.img.Name+".tar")
		if err := images.WriteArchive(path, ref, img); err != nil {
			return nil, "", err
		}
		archives = append(archives, path)
	}
	for _, i := range images.Shipped {
		archives = append(archives, filepath.Join(imagesDir, i.Name+".tar"))
	}
	// The tag the chart is installed with is the one make images gave
	// the archives.
	layout, err := os.MkdirTemp(tmp, "layout")
	if err != nil {
		return nil, "", err
	}
	_, ref, err := images.ReadArchive(filepath.Join(imagesDir, "scheduler.tar"), layout)
	if err != nil {
		return nil, "", fmt.Errorf("the scheduler's image archive: %w (make images writes it)", err)
	}
	return archives, ref[strings.LastIndex(ref, ":")+1:], nil
}

// Values are the chart values a cluster of this kind needs beyond the
// defaults; the README's Deploy section names each.
func Values(tag string) []string {
	return []string{
		"--set", "image.tag=" + tag,
		// No NVIDIA container runtime here.
		"--set", "exporter.runtimeClassName=null",
		// GPUs are simulated: the nodes' sysfs trees.
		"--set", "sysfsRoot=" + realcluster.MachineDir,
		"--set", "allocationProxy.enabled=true",
	}
}

// VendorManifest is the stand-in vendor device plugin's DaemonSet: GPUs
// and VFs register with the allocation proxy (VendorDir), or with the
// kubelet when toKubelet; RDMA slots with the kubelet, as the NVIDIA,
// SR-IOV and RDMA shared plugins would once pointed at the proxy
// (docs/allocation-proxy.md).
func VendorManifest(toKubelet bool) string {
	dir := VendorDir
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
`, VendorNS, StandinRef, dir, VendorDir, realcluster.MachineDir)
}

// Run runs a command in the cluster's namespaces (helm, kubectl) and
// returns its output.
func Run(ctx context.Context, c *realcluster.Cluster, name string, args ...string) (string, error) {
	var out strings.Builder
	cmd := c.Command(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// Apply applies a manifest with kubectl.
func Apply(ctx context.Context, c *realcluster.Cluster, manifest string) error {
	f, err := os.CreateTemp(c.Dir, "manifest-*.yaml")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(manifest); err != nil {
		return err
	}
	f.Close()
	_, err = Run(ctx, c, "kubectl", "apply", "-f", f.Name())
	return err
}
