// Package realcluster runs a real Kubernetes cluster on one machine, for
// tests that must meet what a user's cluster is: separate processes of
// etcd, kube-apiserver (RBAC, the Node authorizer, NodeRestriction,
// GenericWorkload and the PodGroup API on), kube-controller-manager (it
// signs the pod-bound service-account tokens), kube-scheduler and
// kube-proxy (iptables), and nodes of a real kubelet with a real
// containerd and runc each, on a CNI bridge network. Every binary comes
// from a Go module the project pins (`make cluster-bin`), plus Debian's
// runc and iptables.
//
// The host is left as it was. The cluster lives in private namespaces:
//
//   - a network namespace of its own: the control plane and the nodes
//     listen on 10.200.0.0/24 there (fixed ports collide with nothing),
//     and kube-proxy's iptables chains, the bridges and the net.* sysctls
//     the bridge plugin and kube-proxy set stay in it;
//   - a PID namespace whose first process is the cluster's: when it dies
//     (Close, or the test process dying), every process of the cluster,
//     containers and shims included, dies with it;
//   - a mount namespace, and one more per node inside it, in which /run
//     (containerd's shim sockets, /run/netns), /var/lib (/var/lib/kubelet,
//     /var/lib/cni) and /var/log are the node's own directories, and the
//     kernel sysctls the kubelet sets are files bound over /proc/sys.
//
// Cgroups are the one thing the namespaces do not hide: each node's pods
// go under /sys/fs/cgroup/<controller>/<CgroupParent>/<node>, which Close
// removes. HostState records what a test compares before and after.
//
// The test process reaches the cluster through Dial, which opens
// connections from inside the cluster's network namespace; helm and
// kubectl run there through Command.
//
// It needs root; Check says why this machine cannot run it. This is test
// machinery: no product package imports it.
package realcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// BinDirEnv names the directory of the cluster's binaries; make
// cluster-bin builds them there and make test-cluster sets it.
const BinDirEnv = "NICAFFINITY_CLUSTER_BIN"

// Addresses inside the cluster's network namespace.
const (
	// APIServerIP is the control plane's address; the apiserver listens
	// on APIServerIP:6443.
	APIServerIP = "10.200.0.1"
	// ServiceCIDR holds the Services' cluster IPs; the first is the
	// apiserver's.
	ServiceCIDR = "10.96.0.0/16"
	// PodCIDR holds every node's pod subnet, 10.244.<i>.0/24.
	PodCIDR = "10.244.0.0/16"
)

// NodeIP is node i's address.
func NodeIP(i int) string { return fmt.Sprintf("10.200.0.%d", 11+i) }

// MachineDir is where each node's simulated sysfs tree appears inside the
// node's mount namespace: the chart's sysfsRoot on this cluster.
const MachineDir = "/var/lib/nicaffinity-test/sys"

// CgroupParent is the cgroup, in every v1 hierarchy, under which the
// nodes' pods run.
const CgroupParent = "nicaffinity-realcluster"

// Binaries are the files BinDir must hold.
var Binaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "kubelet", "kubectl", "helm",
	"containerd", "containerd-shim-runc-v2", "ctr", "pause", "cni/bridge", "cni/host-local", "cni/loopback", "cni/portmap"}

// NodeSpec describes one node.
type NodeSpec struct {
	Name string
	// Labels are the Node's labels at registration (the kubelet's
	// --node-labels).
	Labels map[string]string
	// Prepare, when set, fills the node's directory before it starts:
	// MachineDir's tree, say. dir is the node's side of MachineDir.
	Prepare func(machineDir string) error
}

// Options configure a cluster.
type Options struct {
	// BinDir holds Binaries; empty means $NICAFFINITY_CLUSTER_BIN.
	BinDir string
	Nodes  []NodeSpec
	// Images are OCI archives imported into every node's containerd
	// before its kubelet starts (the sandbox image is built here).
	Images []string
	// FeatureGates are given to the apiserver, controller manager and
	// scheduler; PodGroupAPI serves scheduling.k8s.io/v1beta1.
	FeatureGates string
	PodGroupAPI  bool
	// Dir is where everything goes; empty is a new temp dir, removed by
	// Close. A short path: unix sockets live there.
	Dir string
	// Keep leaves Dir in place after Close.
	Keep bool
}

// Cluster is a running cluster.
type Cluster struct {
	Dir string
	// Kubeconfig is an admin kubeconfig for Command's helm and kubectl.
	Kubeconfig string
	// Config is the admin's rest config, dialing through Dial.
	Config *rest.Config
	Kube   kubernetes.Interface
	Nodes  []*Node

	opts    Options
	bin     string
	init    *exec.Cmd
	initPID int
	netns   *os.File
	mu      sync.Mutex
	procs   map[string]*exec.Cmd
	exited  map[string]string
	closing bool

	dials                  chan dialRequest
	stopDialer, dialerDone chan struct{}
	cgroups                []string
}

// Node is one node of the cluster.
type Node struct {
	Spec NodeSpec
	IP   string
	// Dir is the node's directory: kubelet/ is its /var/lib/kubelet,
	// machine/ its MachineDir, log/ its /var/log.
	Dir string
}

// KubeletDir is the node's /var/lib/kubelet as the host sees it.
func (n *Node) KubeletDir() string { return filepath.Join(n.Dir, "kubelet") }

// Check says why this machine cannot run the cluster, or nil.
func Check() error {
	if os.Geteuid() != 0 {
		return errors.New("the real cluster needs root (private namespaces, bind mounts, runc): run make test-cluster as root")
	}
	for _, tool := range []string{"unshare", "nsenter", "mount", "ip", "runc", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("the real cluster needs %s, which is not on PATH: on Debian, apt-get install runc iptables iproute2 util-linux (make test-cluster does it as root)", tool)
		}
	}
	if out, err := exec.Command("unshare", "--net", "--mount", "--pid", "--fork", "--propagation", "private", "true").CombinedOutput(); err != nil {
		return fmt.Errorf("the real cluster needs network, mount and PID namespaces, and unshare fails here: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// BinDir is $NICAFFINITY_CLUSTER_BIN, checked.
func BinDir() (string, error) {
	d := os.Getenv(BinDirEnv)
	if d == "" {
		return "", fmt.Errorf("$%s is not set: make test-cluster builds the cluster's binaries (make cluster-bin) and sets it", BinDirEnv)
	}
	for _, b := range Binaries {
		if st, err := os.Stat(filepath.Join(d, b)); err != nil || st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("$%s=%s lacks an executable %s (make cluster-bin builds it)", BinDirEnv, d, b)
		}
	}
	return filepath.Abs(d)
}

// Start brings a cluster up: certificates, the cluster's namespaces, etcd
// and the control plane, then each node. It returns once the apiserver
// answers and every node is Ready.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if err := Check(); err != nil {
		return nil, err
	}
	bin := opts.BinDir
	if bin == "" {
		if bin, err = BinDir(); err != nil {
			return nil, err
		}
	}
	if len(opts.Nodes) == 0 || len(opts.Nodes) > 200 {
		return nil, fmt.Errorf("realcluster: %d nodes, want 1 to 200", len(opts.Nodes))
	}
	dir := opts.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "rc"); err != nil {
			return nil, err
		}
	}
	c = &Cluster{Dir: dir, opts: opts, bin: bin, procs: map[string]*exec.Cmd{}, exited: map[string]string{}}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w%s", err, c.logTails())
			c.Close()
			c = nil
		}
	}()
	for _, d := range []string{"pki", "logs", "etcd", "flex", "cgroup-check"} {
		if err := os.MkdirAll(c.path(d), 0o700); err != nil {
			return c, err
		}
	}
	if err := c.writePKI(); err != nil {
		return c, fmt.Errorf("certificates: %w", err)
	}
	if err := c.startNamespaces(); err != nil {
		return c, err
	}
	if err := c.connect(); err != nil {
		return c, err
	}
	if err := c.startControlPlane(ctx); err != nil {
		return c, err
	}
	for i, s := range opts.Nodes {
		if err := c.startNode(i, s); err != nil {
			return c, fmt.Errorf("node %s: %w", s.Name, err)
		}
	}
	if err := c.waitNodesReady(ctx); err != nil {
		return c, err
	}
	return c, nil
}

func (c *Cluster) path(p ...string) string { return filepath.Join(append([]string{c.Dir}, p...)...) }

// initScript makes the cluster's network and becomes its first process.
// k8s0 is one end of a veth pair (a device that needs no kernel module
// beyond veth): the control plane's and the nodes' addresses live on it.
const initScript = `set -e
ip link set lo up
ip link add k8s0 type veth peer name k8s0p
ip link set k8s0 up
ip link set k8s0p up
for a in "$@"; do ip addr add "$a/24" dev k8s0; done
ip route add default via 10.200.0.254 dev k8s0 onlink
exec "$PAUSE"
`

func (c *Cluster) startNamespaces() error {
	addrs := []string{APIServerIP}
	for i := range c.opts.Nodes {
		addrs = append(addrs, NodeIP(i))
	}
	log, err := os.Create(c.path("logs", "init.log"))
	if err != nil {
		return err
	}
	cmd := exec.Command("unshare", append([]string{"--net", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc", "--propagation", "private",
		"--", "/bin/sh", "-c", initScript, "init"}, addrs...)...)
	cmd.Env = append(os.Environ(), "PAUSE="+filepath.Join(c.bin, "pause"))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("starting the cluster's namespaces: %w", err)
	}
	c.init = cmd
	go func() { _ = cmd.Wait(); log.Close() }()
	// The first process of the new PID namespace is unshare's child; it
	// is ready once it runs pause.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if pid := childOf(cmd.Process.Pid); pid > 0 {
			if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); strings.HasSuffix(exe, "/pause") {
				c.initPID = pid
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return errors.New("the cluster's namespaces did not come up in 10 s (logs/init.log)")
}

// childOf is a process's first child, or 0.
func childOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(f[0])
	return n
}

// connect opens the cluster's network namespace for Dial and makes the
// admin's client.
func (c *Cluster) connect() error {
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", c.initPID))
	if err != nil {
		return err
	}
	c.netns = f
	c.dials, c.stopDialer, c.dialerDone = make(chan dialRequest), make(chan struct{}), make(chan struct{})
	ready := make(chan error, 1)
	go c.dialer(ready)
	if err := <-ready; err != nil {
		return err
	}
	c.Kubeconfig = c.path("pki", "admin.kubeconfig")
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.Dial = c.Dial
	cfg.QPS, cfg.Burst = 100, 200
	c.Config = cfg
	c.Kube, err = kubernetes.NewForConfig(cfg)
	return err
}

// Dial opens a connection from inside the cluster's network namespace.
// A socket stays in the namespace it was made in, so every socket is made
// on one OS thread that entered the namespace (dialer). Dials are
// serialized through it; they are to local addresses and quick.
func (c *Cluster) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	r := dialRequest{ctx: ctx, network: network, addr: addr, result: make(chan dialResult, 1)}
	select {
	case c.dials <- r:
	case <-c.dialerDone:
		return nil, errors.New("the cluster is closed")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	res := <-r.result
	return res.conn, res.err
}

type dialRequest struct {
	ctx           context.Context
	network, addr string
	result        chan dialResult
}

type dialResult struct {
	conn net.Conn
	err  error
}

// dialer serves Dial on a thread of its own in the cluster's network
// namespace. The thread must outlive every process the harness started:
// a child started with Pdeathsig dies when the thread that forked it
// exits, and a thread ends when a goroutine locked to it returns. So the
// goroutine never unlocks, and returns only at Close, when every process
// is dying anyway.
func (c *Cluster) dialer(ready chan<- error) {
	runtime.LockOSThread()
	if err := unix.Setns(int(c.netns.Fd()), unix.CLONE_NEWNET); err != nil {
		ready <- fmt.Errorf("entering the cluster's network namespace: %w", err)
		close(c.dialerDone)
		<-c.stopDialer
		return
	}
	ready <- nil
	for {
		select {
		case <-c.stopDialer:
			close(c.dialerDone)
			return
		case r := <-c.dials:
			ctx, cancel := context.WithTimeout(r.ctx, 10*time.Second)
			var d net.Dialer
			conn, err := d.DialContext(ctx, r.network, r.addr)
			cancel()
			r.result <- dialResult{conn, err}
		}
	}
}

// Command is a command run inside the cluster's network and mount
// namespaces (helm, kubectl, curl), with KUBECONFIG set to the admin's.
func (c *Cluster) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	if !strings.Contains(name, "/") {
		if _, err := os.Stat(filepath.Join(c.bin, name)); err == nil {
			name = filepath.Join(c.bin, name)
		}
	}
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--target", strconv.Itoa(c.initPID), "--net", "--mount", "--", name}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig, "HOME="+c.path("home"), "HELM_CACHE_HOME="+c.path("home", "cache"),
		"HELM_CONFIG_HOME="+c.path("home", "config"), "HELM_DATA_HOME="+c.path("home", "data"))
	return cmd
}

// start runs a component inside the cluster's namespaces, its output in
// logs/<name>.log.
func (c *Cluster) start(name string, env []string, argv ...string) error {
	log, err := os.OpenFile(c.path("logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command("nsenter", append([]string{"--target", strconv.Itoa(c.initPID), "--net", "--mount", "--pid", "--"}, argv...)...)
	cmd.Env = append(append(os.Environ(), "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"), env...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Dir = c.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("starting %s: %w", name, err)
	}
	c.mu.Lock()
	c.procs[name] = cmd
	c.mu.Unlock()
	go func() {
		err := cmd.Wait()
		log.Close()
		c.mu.Lock()
		if c.procs[name] == cmd {
			c.exited[name] = fmt.Sprintf("%s exited (%v); its log's last lines:\n%s", name, err, c.Log(name, 10))
		}
		c.mu.Unlock()
	}()
	return nil
}

// Healthy says which of the cluster's processes has exited, or nil.
func (c *Cluster) Healthy() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return nil
	}
	for _, why := range c.exited {
		return errors.New(why)
	}
	return nil
}

// Log is the tail of a component's log (etcd, kube-apiserver, ...,
// kubelet-<node>, containerd-<node>).
func (c *Cluster) Log(name string, lines int) string {
	p := c.path("logs", name+".log")
	for _, n := range c.Nodes {
		if name == "containerd-"+n.Spec.Name {
			p = filepath.Join(n.Dir, "containerd.log")
		}
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

func (c *Cluster) logTails() string {
	var b strings.Builder
	entries, _ := os.ReadDir(c.path("logs"))
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".log")
		fmt.Fprintf(&b, "\n--- %s, last lines:\n%s", name, c.Log(name, 15))
	}
	return b.String()
}

// Close stops the cluster: its first process dies, and with it every
// process in its PID namespace; then the nodes' cgroups are removed and,
// unless Keep, the directory.
func (c *Cluster) Close() {
	c.mu.Lock()
	c.closing = true
	c.mu.Unlock()
	if c.init != nil && c.init.Process != nil {
		_ = c.init.Process.Kill()
		if c.initPID > 0 {
			_ = syscall.Kill(c.initPID, syscall.SIGKILL)
		}
		deadline := time.Now().Add(30 * time.Second)
		for c.initPID > 0 && time.Now().Before(deadline) {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", c.initPID)); err != nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if c.stopDialer != nil {
		close(c.stopDialer)
		<-c.dialerDone
	}
	if c.netns != nil {
		c.netns.Close()
	}
	removeCgroups(c.cgroups)
	if !c.opts.Keep && c.Dir != "" {
		// The nodes' overlay snapshots may still be unmounting in a
		// namespace that is going away.
		for range 50 {
			if os.RemoveAll(c.Dir) == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// writeKubeconfig writes a kubeconfig for a client certificate.
func (c *Cluster) writeKubeconfig(path, certName string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["nicaffinity-test"] = &clientcmdapi.Cluster{Server: "https://" + APIServerIP + ":6443", CertificateAuthority: c.path("pki", "ca.crt")}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificate: c.path("pki", certName+".crt"), ClientKey: c.path("pki", certName+".key")}
	cfg.Contexts["nicaffinity-test"] = &clientcmdapi.Context{Cluster: "nicaffinity-test", AuthInfo: "user"}
	cfg.CurrentContext = "nicaffinity-test"
	return clientcmd.WriteToFile(*cfg, path)
}

func (c *Cluster) writePKI() error {
	pki := c.path("pki")
	ca, err := newCA(pki)
	if err != nil {
		return err
	}
	if err := serviceAccountKey(pki); err != nil {
		return err
	}
	_, svc, _ := net.ParseCIDR(ServiceCIDR)
	first := make(net.IP, 4)
	copy(first, svc.IP.To4())
	first[3]++
	if err := ca.issue("apiserver", "kube-apiserver", nil,
		[]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"},
		[]net.IP{first, net.ParseIP(APIServerIP), net.ParseIP("127.0.0.1")}); err != nil {
		return err
	}
	clients := map[string][2]string{
		"admin":                   {"kubernetes-admin", "system:masters"},
		"apiserver-kubelet":       {"kube-apiserver-kubelet-client", "system:masters"},
		"kube-controller-manager": {"system:kube-controller-manager", ""},
		"kube-scheduler":          {"system:kube-scheduler", ""},
		"kube-proxy":              {"system:kube-proxy", ""},
	}
	for i, n := range c.opts.Nodes {
		clients["node-"+strconv.Itoa(i)] = [2]string{"system:node:" + n.Name, "system:nodes"}
	}
	for name, id := range clients {
		var orgs []string
		if id[1] != "" {
			orgs = []string{id[1]}
		}
		if err := ca.issue(name, id[0], orgs, nil, nil); err != nil {
			return err
		}
		if name != "apiserver-kubelet" {
			if err := c.writeKubeconfig(c.path("pki", name+".kubeconfig"), name); err != nil {
				return err
			}
		}
	}
	return nil
}
