// Package realkubelet runs Kubernetes' own kubelet (cmd/kubelet at the
// project's Kubernetes version) as a child process against an in-process
// control plane, for tests that must meet the real device manager and the
// real podresources server: cri-client's fake CRI runtime serves it
// containers that never run.
//
// The kubelet uses fixed host paths whatever its flags say: the device
// manager listens at /var/lib/kubelet/device-plugins/kubelet.sock, it
// writes /var/log/pods and /var/log/containers, and it sets kernel sysctls.
// So it runs in a private mount namespace (unshare --mount) in which
//
//   - /var/lib is a tmpfs and /var/lib/kubelet a bind of Dir,
//   - /var/log is a bind of a temp dir,
//   - the sysctls it sets are regular files bound over their /proc/sys
//     entries,
//
// and the host sees none of it. Inside, /var/lib/kubelet is Dir, so the
// test process reaches the kubelet's sockets at DevicePluginDir and
// PodResourcesSocket without entering the namespace (a multithreaded Go
// process cannot join another mount namespace).
//
// It needs root and mount namespaces; Check says why not, and nothing here
// skips. This is test machinery: no product package imports it.
package realkubelet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kubeletconfig "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

// BinaryEnv names the kubelet binary; make test-kubelet builds it and sets it.
const BinaryEnv = "NICAFFINITY_KUBELET"

// Sysctls are the kernel settings the kubelet's container manager sets
// (setupKernelTunables in pkg/kubelet/cm), as /proc/sys paths. Each is
// shadowed by a file inside the namespace, so the host keeps its values.
var Sysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// HostPaths are the host paths the kubelet writes when nothing shadows
// them; none may change while it runs.
var HostPaths = []string{"/var/lib/kubelet", "/var/log/containers", "/var/log/pods"}

// Options configure one kubelet.
type Options struct {
	// NodeName is the Node the kubelet registers.
	NodeName string
	// Server is the apiserver; the kubelet authenticates with Token (the
	// node's identity, system:node:<NodeName>) and trusts Server's CA.
	Server *rest.Config
	Token  string
	// Binary is the kubelet; empty means $NICAFFINITY_KUBELET.
	Binary string
	// CPUManagerPolicy ("none" or "static") and TopologyManagerPolicy
	// ("none", "single-numa-node", ...); empty means none.
	CPUManagerPolicy, TopologyManagerPolicy string
	// Verbosity is the kubelet's -v.
	Verbosity int
}

// Kubelet is one real kubelet and its fake CRI runtime.
type Kubelet struct {
	// Dir is /var/lib/kubelet inside the kubelet's namespace.
	Dir string
	// DevicePluginDir holds the device manager's kubelet.sock; device
	// plugins serve their sockets here.
	DevicePluginDir string
	// PodResourcesSocket is the kubelet's podresources server.
	PodResourcesSocket string

	rt     *runtime
	opts   Options
	base   string
	binary string
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	starts int
}

// Check says why this machine cannot run a real kubelet, or nil.
func Check() error {
	if os.Geteuid() != 0 {
		return errors.New("the real kubelet needs root (it runs in a private mount namespace with bind mounts): run the kubelet tests as root")
	}
	if out, err := exec.Command("unshare", "--mount", "--propagation", "private", "true").CombinedOutput(); err != nil {
		return fmt.Errorf("the real kubelet needs a private mount namespace, and unshare --mount fails here: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Binary is the kubelet binary from $NICAFFINITY_KUBELET.
func Binary() (string, error) {
	b := os.Getenv(BinaryEnv)
	if b == "" {
		return "", fmt.Errorf("$%s is not set: make test-kubelet builds k8s.io/kubernetes/cmd/kubelet and sets it", BinaryEnv)
	}
	if st, err := os.Stat(b); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("$%s=%s is not an executable kubelet: %v", BinaryEnv, b, err)
	}
	return b, nil
}

// New prepares a kubelet's directories, configuration and CRI runtime;
// Start runs it. Close removes everything.
func New(opts Options) (*Kubelet, error) {
	if err := Check(); err != nil {
		return nil, err
	}
	binary := opts.Binary
	if binary == "" {
		var err error
		if binary, err = Binary(); err != nil {
			return nil, err
		}
	}
	if opts.NodeName == "" || opts.Server == nil || opts.Token == "" {
		return nil, errors.New("realkubelet: NodeName, Server and Token are required")
	}
	// Unix socket paths are at most 108 bytes: a short base directory.
	base, err := os.MkdirTemp("", "rk")
	if err != nil {
		return nil, err
	}
	k := &Kubelet{opts: opts, base: base, binary: binary, Dir: filepath.Join(base, "lib")}
	k.DevicePluginDir = filepath.Join(k.Dir, "device-plugins")
	k.PodResourcesSocket = filepath.Join(k.Dir, "pod-resources", "kubelet.sock")
	if err := k.prepare(); err != nil {
		k.Close()
		return nil, err
	}
	return k, nil
}

func (k *Kubelet) path(p ...string) string { return filepath.Join(append([]string{k.base}, p...)...) }

// prepare writes the files and starts the CRI runtime.
func (k *Kubelet) prepare() error {
	for _, d := range []string{k.DevicePluginDir, k.path("cwd"), k.path("log"), k.path("sysctl"), k.path("volume-plugins")} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return err
		}
	}
	for _, s := range Sysctls {
		v, err := os.ReadFile(filepath.Join("/proc/sys", s))
		if err != nil {
			continue // not on this kernel: the script binds only what exists
		}
		if err := os.WriteFile(k.path("sysctl", strings.ReplaceAll(s, "/", ".")), v, 0o644); err != nil {
			return err
		}
	}
	if err := k.writeKubeconfig(); err != nil {
		return err
	}
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	cfg, err := ConfigYAML(k.config(ports[0], ports[1]))
	if err != nil {
		return err
	}
	if err := os.WriteFile(k.path("config.yaml"), cfg, 0o600); err != nil {
		return err
	}
	k.rt = newRuntime()
	return k.rt.start(k.path("cri.sock"))
}

func (k *Kubelet) writeKubeconfig() error {
	c := k.opts.Server
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: c.Host, CertificateAuthorityData: c.CAData, CertificateAuthority: c.CAFile, TLSServerName: c.ServerName, InsecureSkipTLSVerify: c.Insecure}
	cfg.AuthInfos["node"] = &clientcmdapi.AuthInfo{Token: k.opts.Token}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "node"}
	cfg.CurrentContext = "test"
	return clientcmd.WriteToFile(*cfg, k.path("kubeconfig"))
}

// config is a KubeletConfiguration for these machines: cgroup v1 allowed,
// no QoS cgroups or enforced allocatable, swap allowed, its servers on
// loopback ports of its own, and evictions only at the very end of memory
// and disk (a test's pods must not be evicted because CI's disk is full).
func (k *Kubelet) config(port, healthz int) *kubeletconfig.KubeletConfiguration {
	f, t := false, true
	p, h, zero := int32(port), int32(healthz), int32(0)
	cri := "unix://" + k.path("cri.sock")
	cfg := &kubeletconfig.KubeletConfiguration{
		TypeMeta:                  metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		Address:                   "127.0.0.1",
		Port:                      p,
		HealthzBindAddress:        "127.0.0.1",
		HealthzPort:               &h,
		ReadOnlyPort:              zero,
		FailSwapOn:                &f,
		FailCgroupV1:              &f,
		CgroupsPerQOS:             &f,
		CgroupDriver:              "cgroupfs",
		EnforceNodeAllocatable:    []string{},
		ContainerRuntimeEndpoint:  cri,
		ImageServiceEndpoint:      cri,
		PodLogsDir:                "/var/log/pods",
		VolumePluginDir:           k.path("volume-plugins"),
		NodeStatusUpdateFrequency: metav1.Duration{Duration: time.Second},
		SyncFrequency:             metav1.Duration{Duration: 5 * time.Second},
		RegisterNode:              &t,
		ResolverConfig:            new(string),
		EvictionHard:              map[string]string{"memory.available": "1Mi", "nodefs.available": "1%", "nodefs.inodesFree": "1%", "imagefs.available": "1%", "imagefs.inodesFree": "1%"},
		CPUManagerPolicy:          k.opts.CPUManagerPolicy,
		TopologyManagerPolicy:     k.opts.TopologyManagerPolicy,
		Authentication: kubeletconfig.KubeletAuthentication{
			Anonymous: kubeletconfig.KubeletAnonymousAuthentication{Enabled: &t},
			Webhook:   kubeletconfig.KubeletWebhookAuthentication{Enabled: &f},
		},
		Authorization: kubeletconfig.KubeletAuthorization{Mode: kubeletconfig.KubeletAuthorizationModeAlwaysAllow},
	}
	if cfg.CPUManagerPolicy == "static" {
		// The static policy needs CPUs reserved for the system.
		cfg.ReservedSystemCPUs = "0"
	}
	return cfg
}

// ConfigYAML writes cfg with enforceNodeAllocatable as an empty list, which
// the typed struct's omitempty would drop (and the kubelet would then
// default it to "pods", which needs QoS cgroups).
func ConfigYAML(cfg *kubeletconfig.KubeletConfiguration) ([]byte, error) {
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	doc["enforceNodeAllocatable"] = []any{}
	return yaml.Marshal(doc)
}

func freePorts(n int) ([]int, error) {
	var out []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// script sets up the namespace, then becomes the kubelet. Each mount
// shadows a host path the kubelet would write.
const script = `set -e
base="$1"; shift
mount -t tmpfs tmpfs /var/lib
mkdir -p /var/lib/kubelet
mount --bind "$base/lib" /var/lib/kubelet
mount --bind "$base/log" /var/log
for f in "$base"/sysctl/*; do
  [ -e "$f" ] || continue
  mount --bind "$f" "/proc/sys/$(basename "$f" | tr . /)"
done
exec "$@"
`

// Start runs the kubelet (again, after Stop). It returns once the process
// runs; WaitReady waits for its Node.
func (k *Kubelet) Start() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cmd != nil {
		return nil
	}
	k.starts++
	log, err := os.Create(k.path(fmt.Sprintf("kubelet-%d.log", k.starts)))
	if err != nil {
		return err
	}
	args := []string{"--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh", k.base, k.binary,
		"--config=" + k.path("config.yaml"), "--kubeconfig=" + k.path("kubeconfig"),
		"--hostname-override=" + k.opts.NodeName, fmt.Sprintf("--v=%d", k.opts.Verbosity)}
	cmd := exec.Command("unshare", args...)
	cmd.Stdout, cmd.Stderr = log, log
	// An empty directory of its own: the kubelet's log manager removes
	// files by patterns relative to it when a runtime reports no log path.
	cmd.Dir = k.path("cwd")
	// The kubelet dies with the test process, even one that is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("starting the kubelet: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		log.Close()
		close(exited)
	}()
	k.cmd, k.exited = cmd, exited
	return nil
}

// Running reports whether the kubelet process is alive.
func (k *Kubelet) Running() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cmd == nil {
		return false
	}
	select {
	case <-k.exited:
		return false
	default:
		return true
	}
}

// Stop stops the kubelet as systemd would (SIGTERM, then SIGKILL after 10
// s). Its pods' containers stay in the CRI runtime, as on a node.
func (k *Kubelet) Stop() {
	k.mu.Lock()
	cmd, exited := k.cmd, k.exited
	k.cmd = nil
	k.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a paused kubelet must see the SIGTERM
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// Pause freezes the kubelet (SIGSTOP) until Resume: a pod bound meanwhile
// is admitted only after Resume, so a test can restart something else
// between a pod's binding and its admission.
func (k *Kubelet) Pause() error { return k.signal(syscall.SIGSTOP) }

// Resume lets a paused kubelet run on (SIGCONT).
func (k *Kubelet) Resume() error { return k.signal(syscall.SIGCONT) }

func (k *Kubelet) signal(sig syscall.Signal) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cmd == nil {
		return errors.New("the kubelet is not running")
	}
	return k.cmd.Process.Signal(sig)
}

// Restart stops and starts the kubelet.
func (k *Kubelet) Restart() error {
	k.Stop()
	return k.Start()
}

// Log is the tail of the kubelet's latest log, for failure messages.
func (k *Kubelet) Log(lines int) string {
	k.mu.Lock()
	n := k.starts
	k.mu.Unlock()
	b, err := os.ReadFile(k.path(fmt.Sprintf("kubelet-%d.log", n)))
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// WaitSocket waits until a unix socket of the kubelet accepts connections.
func WaitSocket(ctx context.Context, path string) error {
	for {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("socket %s: %w", path, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Close stops the kubelet and the runtime and removes every file.
func (k *Kubelet) Close() {
	k.Stop()
	if k.rt != nil {
		k.rt.stop()
	}
	os.RemoveAll(k.base)
}

// HostState records what the kubelet would change on the host if nothing
// shadowed it: each of HostPaths (absent, or its entries with their sizes
// and modification times) and each of Sysctls' values. Two records taken
// around a kubelet's life must be equal.
func HostState() map[string]string {
	out := map[string]string{}
	PathsState(HostPaths, out)
	for _, s := range Sysctls {
		v, err := os.ReadFile(filepath.Join("/proc/sys", s))
		if err != nil {
			out["sysctl "+s] = "unreadable"
			continue
		}
		out["sysctl "+s] = strings.TrimSpace(string(v))
	}
	return out
}

// PathsState records each path in out: "absent", or its entries with
// their sizes and modification times.
func PathsState(paths []string, out map[string]string) {
	for _, p := range paths {
		var b strings.Builder
		err := filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if info, err := d.Info(); err == nil {
				fmt.Fprintf(&b, "%s %d %d\n", path, info.Size(), info.ModTime().UnixNano())
			}
			return nil
		})
		if errors.Is(err, os.ErrNotExist) {
			out[p] = "absent"
			continue
		}
		out[p] = b.String()
	}
}
