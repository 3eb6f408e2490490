package realcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/nicaffinity/nicaffinity/internal/realkubelet"
)

func (c *Cluster) gates() []string {
	if c.opts.FeatureGates == "" {
		return nil
	}
	return []string{"--feature-gates=" + c.opts.FeatureGates}
}

// startControlPlane starts etcd, the apiserver, and once it answers, the
// controller manager, the scheduler and kube-proxy.
func (c *Cluster) startControlPlane(ctx context.Context) error {
	b := func(n string) string { return filepath.Join(c.bin, n) }
	pki := func(n string) string { return c.path("pki", n) }
	if err := c.start("etcd", nil, b("etcd"), "--name=default", "--data-dir="+c.path("etcd"),
		"--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=default=http://127.0.0.1:2380", "--unsafe-no-fsync", "--log-level=warn"); err != nil {
		return err
	}
	api := []string{b("kube-apiserver"), "--etcd-servers=http://127.0.0.1:2379",
		"--advertise-address=" + APIServerIP, "--bind-address=0.0.0.0", "--secure-port=6443",
		"--tls-cert-file=" + pki("apiserver.crt"), "--tls-private-key-file=" + pki("apiserver.key"),
		"--client-ca-file=" + pki("ca.crt"),
		"--kubelet-client-certificate=" + pki("apiserver-kubelet.crt"), "--kubelet-client-key=" + pki("apiserver-kubelet.key"),
		"--kubelet-preferred-address-types=InternalIP",
		"--service-account-key-file=" + pki("sa.pub"), "--service-account-signing-key-file=" + pki("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--allow-privileged=true", "--profiling=false", "--v=1"}
	api = append(api, c.gates()...)
	if c.opts.PodGroupAPI {
		api = append(api, "--runtime-config=scheduling.k8s.io/v1beta1=true")
	}
	if err := c.start("kube-apiserver", nil, api...); err != nil {
		return err
	}
	if err := c.waitAPIServer(ctx); err != nil {
		return err
	}
	cm := append([]string{b("kube-controller-manager"), "--kubeconfig=" + pki("kube-controller-manager.kubeconfig"),
		"--authentication-kubeconfig=" + pki("kube-controller-manager.kubeconfig"),
		"--authorization-kubeconfig=" + pki("kube-controller-manager.kubeconfig"),
		"--service-account-private-key-file=" + pki("sa.key"), "--root-ca-file=" + pki("ca.crt"),
		"--use-service-account-credentials=true", "--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=10257", "--flex-volume-plugin-dir=" + c.path("flex"),
		"--v=1"}, c.gates()...)
	if err := c.start("kube-controller-manager", nil, cm...); err != nil {
		return err
	}
	sched := append([]string{b("kube-scheduler"), "--kubeconfig=" + pki("kube-scheduler.kubeconfig"),
		"--authentication-kubeconfig=" + pki("kube-scheduler.kubeconfig"),
		"--authorization-kubeconfig=" + pki("kube-scheduler.kubeconfig"),
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=10259", "--v=1"}, c.gates()...)
	if err := c.start("kube-scheduler", nil, sched...); err != nil {
		return err
	}
	// One kube-proxy serves the one network namespace every node shares.
	proxyCfg := map[string]any{
		"apiVersion":         "kubeproxy.config.k8s.io/v1alpha1",
		"kind":               "KubeProxyConfiguration",
		"clientConnection":   map[string]any{"kubeconfig": pki("kube-proxy.kubeconfig")},
		"mode":               "iptables",
		"hostnameOverride":   c.opts.Nodes[0].Name,
		"clusterCIDR":        PodCIDR,
		"bindAddress":        APIServerIP,
		"metricsBindAddress": "127.0.0.1:10249",
		"healthzBindAddress": "127.0.0.1:10256",
		// Leave the host's global conntrack table size alone.
		"conntrack": map[string]any{"maxPerCore": 0, "min": 0},
	}
	raw, err := yaml.Marshal(proxyCfg)
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.path("kube-proxy.yaml"), raw, 0o600); err != nil {
		return err
	}
	return c.start("kube-proxy", nil, b("kube-proxy"), "--config="+c.path("kube-proxy.yaml"), "--v=1")
}

func (c *Cluster) waitAPIServer(ctx context.Context) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Healthy(); err != nil {
			return false, err
		}
		body, err := c.Kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			last = err
			return false, nil
		}
		return strings.TrimSpace(string(body)) == "ok", nil
	})
	if err != nil {
		return fmt.Errorf("the apiserver did not become ready: %v (last: %v)", err, last)
	}
	return nil
}

// nodeScript sets up a node's private mounts, starts its containerd,
// imports the images and becomes its kubelet.
const nodeScript = `set -e
n="$1"; shift
mount -t tmpfs tmpfs /run
mkdir -p /run/netns /run/containerd
mount -t tmpfs tmpfs /var/lib
mkdir -p /var/lib/kubelet "$MACHINE_DIR"
mount --bind "$n/kubelet" /var/lib/kubelet
mount --bind "$n/machine" "$MACHINE_DIR"
mount --bind "$n/log" /var/log
for f in "$n"/sysctl/*; do
  [ -e "$f" ] || continue
  mount --bind "$f" "/proc/sys/$(basename "$f" | tr . /)"
done
# Pods may ask for mount propagation; inside this namespace only.
mount --make-rshared /
"$BIN/containerd" --config "$n/containerd.toml" >>"$n/containerd.log" 2>&1 &
i=0
until "$BIN/ctr" --address "$n/containerd.sock" version >/dev/null 2>&1; do
  i=$((i+1)); [ $i -lt 300 ] || { echo "containerd did not start"; exit 1; }
  sleep 0.1
done
for img in "$n"/images/*.tar; do
  [ -e "$img" ] || continue
  "$BIN/ctr" --address "$n/containerd.sock" -n k8s.io images import --no-unpack=false "$img" >/dev/null
done
exec "$BIN/kubelet" "$@"
`

func (c *Cluster) startNode(i int, s NodeSpec) error {
	n := &Node{Spec: s, IP: NodeIP(i), Dir: c.path("nodes", strconv.Itoa(i))}
	c.Nodes = append(c.Nodes, n)
	p := func(x ...string) string { return filepath.Join(append([]string{n.Dir}, x...)...) }
	for _, d := range []string{"kubelet", "machine", "log", "sysctl", "images", "containerd", "cni/net.d", "cni/ipam"} {
		if err := os.MkdirAll(p(d), 0o750); err != nil {
			return err
		}
	}
	if s.Prepare != nil {
		if err := s.Prepare(p("machine")); err != nil {
			return fmt.Errorf("preparing its machine: %w", err)
		}
	}
	for _, sc := range realkubelet.Sysctls {
		v, err := os.ReadFile(filepath.Join("/proc/sys", sc))
		if err != nil {
			continue
		}
		if err := os.WriteFile(p("sysctl", strings.ReplaceAll(sc, "/", ".")), v, 0o644); err != nil {
			return err
		}
	}
	for j, img := range c.opts.Images {
		if err := os.Link(img, p("images", fmt.Sprintf("%02d-%s", j, filepath.Base(img)))); err != nil {
			if err := copyFile(img, p("images", fmt.Sprintf("%02d-%s", j, filepath.Base(img)))); err != nil {
				return err
			}
		}
	}
	cg, err := makeCgroups(filepath.Join(CgroupParent, filepath.Base(c.Dir), s.Name))
	c.cgroups = append(c.cgroups, cg...)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p("containerd.toml"), []byte(c.containerdConfig(n)), 0o600); err != nil {
		return err
	}
	conf, err := cniConfig(i, s.Name, p("cni", "ipam"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(p("cni", "net.d", "10-bridge.conflist"), conf, 0o644); err != nil {
		return err
	}
	kc, err := realkubelet.ConfigYAML(c.kubeletConfig(n))
	if err != nil {
		return err
	}
	if err := os.WriteFile(p("kubelet", "config.yaml"), kc, 0o644); err != nil {
		return err
	}
	var labels []string
	for k, v := range s.Labels {
		labels = append(labels, k+"="+v)
	}
	sort.Strings(labels)
	args := []string{"/bin/sh", "-c", nodeScript, "node", n.Dir,
		"--config=/var/lib/kubelet/config.yaml", "--kubeconfig=" + c.path("pki", "node-"+strconv.Itoa(i)+".kubeconfig"),
		"--hostname-override=" + s.Name, "--node-ip=" + n.IP, "--v=1"}
	if len(labels) > 0 {
		args = append(args, "--node-labels="+strings.Join(labels, ","))
	}
	return c.start("node-"+s.Name, []string{"BIN=" + c.bin, "MACHINE_DIR=" + MachineDir},
		append([]string{"unshare", "--mount", "--propagation", "private", "--"}, args...)...)
}

func (c *Cluster) containerdConfig(n *Node) string {
	p := func(x ...string) string { return filepath.Join(append([]string{n.Dir}, x...)...) }
	return fmt.Sprintf(`version = 3
root = %q
state = "/run/containerd"
[grpc]
  address = %q
[plugins]
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = 'registry.k8s.io/pause:3.10.1'
  [plugins.'io.containerd.cri.v1.runtime']
    # The VM's root may not lower oom_score_adj: without this every pod
    # fails in runc create.
    restrict_oom_score_adj = true
    enable_cdi = false
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      BinaryName = %q
      SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [%q]
      conf_dir = %q
  [plugins.'io.containerd.internal.v1.opt']
    path = %q
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
`, p("containerd", "root"), p("containerd.sock"), runcPath(), filepath.Join(c.bin, "cni"), p("cni", "net.d"), p("containerd", "opt"))
}

func runcPath() string {
	for _, p := range []string{"/usr/sbin/runc", "/usr/bin/runc", "/usr/local/sbin/runc", "/usr/local/bin/runc"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "runc"
}

// cniConfig is node i's bridge network: its own bridge and pod subnet in
// the network namespace the nodes share, so pods of different nodes reach
// each other by plain routing.
func cniConfig(i int, name, ipamDir string) ([]byte, error) {
	return json.MarshalIndent(map[string]any{
		"cniVersion": "1.0.0",
		"name":       "pods-" + name,
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": fmt.Sprintf("cni%d", i), "isGateway": true, "ipMasq": true, "hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": fmt.Sprintf("10.244.%d.0/24", i)}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
					"dataDir": ipamDir,
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}, "", "  ")
}

// kubeletConfig is a node's KubeletConfiguration: the real runtime, the
// node's own address, client certificates checked against the cluster's
// CA and requests authorized by the apiserver, as kubeadm sets up; cgroup
// v1 allowed, pods under the node's own cgroup root, evictions and image
// garbage collection only at the very end (CI's disk may be full-ish).
func (c *Cluster) kubeletConfig(n *Node) *kubeletconfig.KubeletConfiguration {
	f, t := false, true
	port, healthz, zero := int32(10250), int32(10248), int32(0)
	high, low := int32(100), int32(99)
	sock := "unix://" + filepath.Join(n.Dir, "containerd.sock")
	return &kubeletconfig.KubeletConfiguration{
		TypeMeta:           metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		Address:            n.IP,
		Port:               port,
		HealthzBindAddress: n.IP,
		HealthzPort:        &healthz,
		ReadOnlyPort:       zero,
		FailSwapOn:         &f,
		FailCgroupV1:       &f,
		// QoS cgroups under a root of the node's own: the kubelet then
		// gives every pod a cgroup parent there. Without them it gives
		// none, and containerd puts containers under /k8s.io on the host.
		CgroupsPerQOS:               &t,
		CgroupRoot:                  "/" + filepath.Join(CgroupParent, filepath.Base(c.Dir), n.Spec.Name),
		CgroupDriver:                "cgroupfs",
		EnforceNodeAllocatable:      []string{},
		ContainerRuntimeEndpoint:    sock,
		ImageServiceEndpoint:        sock,
		NodeStatusUpdateFrequency:   metav1.Duration{Duration: 2 * time.Second},
		SyncFrequency:               metav1.Duration{Duration: 5 * time.Second},
		ResolverConfig:              new(string),
		ImageGCHighThresholdPercent: &high,
		ImageGCLowThresholdPercent:  &low,
		EvictionHard:                map[string]string{"memory.available": "1Mi", "nodefs.available": "1%", "nodefs.inodesFree": "1%", "imagefs.available": "1%", "imagefs.inodesFree": "1%"},
		Authentication: kubeletconfig.KubeletAuthentication{
			X509:      kubeletconfig.KubeletX509Authentication{ClientCAFile: c.path("pki", "ca.crt")},
			Anonymous: kubeletconfig.KubeletAnonymousAuthentication{Enabled: &f},
			Webhook:   kubeletconfig.KubeletWebhookAuthentication{Enabled: &t},
		},
		Authorization: kubeletconfig.KubeletAuthorization{Mode: kubeletconfig.KubeletAuthorizationModeWebhook},
	}
}

func (c *Cluster) waitNodesReady(ctx context.Context) error {
	var notReady []string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.Healthy(); err != nil {
			return false, err
		}
		notReady = notReady[:0]
		for _, n := range c.Nodes {
			nd, err := c.Kube.CoreV1().Nodes().Get(ctx, n.Spec.Name, metav1.GetOptions{})
			if err != nil || !ready(nd) {
				notReady = append(notReady, n.Spec.Name)
			}
		}
		return len(notReady) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("nodes not Ready: %v (%v)", notReady, err)
	}
	return nil
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}
