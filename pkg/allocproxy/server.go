package allocproxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// Config tunes a Proxy.
type Config struct {
	// KubeletDir is the kubelet's device-plugin directory
	// (/var/lib/kubelet/device-plugins): its kubelet.sock and the proxy's
	// sockets for the kubelet.
	KubeletDir string
	// VendorDir is the proxy's own directory, mounted as the vendor
	// plugins' device-plugin directory: they register at its kubelet.sock
	// and serve their sockets there.
	VendorDir string
	// Kinds says how to read plans for a resource. Resources not listed
	// are forwarded untouched, preferences included.
	Kinds map[string]Kind
	// VFPF maps a VF's PCI address to the RDMA device name of its PF.
	VFPF map[string]string
	// Timeout bounds one GetPreferredAllocation: the plan lookup and the
	// vendor's preference together. Past it the kubelet gets no preference
	// and chooses itself; admission is never held longer.
	Timeout time.Duration
	// ClaimTTL is how long a plan handed to the kubelet counts as taken
	// while the pod does not show as holding the devices yet.
	ClaimTTL time.Duration
	// Poll is how often the kubelet's socket is checked for a restart.
	Poll time.Duration
	// CallTimeout bounds every other call forwarded to a vendor plugin
	// (GetDevicePluginOptions, Allocate, PreStartContainer, and the first
	// answer of ListAndWatch): a hung vendor never holds the kubelet.
	CallTimeout time.Duration
	// MaxFronts is how many resources the proxy fronts at most; past it a
	// registration is refused, counted and reported as an Event on the
	// Node. Vendor plugins register a few resources each.
	MaxFronts int
	// NodeName names the Node that refusals are reported on.
	NodeName string
	// Ports are the RDMA port of each RDMA device to name in NCCL_IB_HCA
	// (1 where absent), and VFRDMA each VF's own RDMA device by its PCI
	// address (its sysfs infiniband/ entry).
	Ports  map[string]int
	VFRDMA map[string]string
	// PlanWait is how long a request that finds no plan of its size looks
	// again, for the pod informer to catch up: the kubelet and the proxy
	// watch the same binding, and either may see it first. It is spent
	// only by pods without a plan (and within Timeout).
	PlanWait time.Duration
	// PlanLookupOff forwards every preference request to the vendor, as if
	// no pod had a plan. It exists for one negative test, which shows that
	// the real kubelet's plans-followed test fails without the proxy's
	// lookup; no flag sets it.
	PlanLookupOff bool
}

// SetNICs fills VFPF, VFRDMA and Ports from the node's topology. VFs are
// mapped once: SR-IOV VFs are made when the node is configured, before the
// device plugin offers them.
func (c *Config) SetNICs(t *topology.Topology) {
	c.VFPF, c.VFRDMA, c.Ports = map[string]string{}, map[string]string{}, map[string]int{}
	for _, n := range t.NICs {
		for _, vf := range n.VFs {
			c.VFPF[vf] = n.Name
		}
		if n.PhysFn != "" {
			c.VFRDMA[n.PCI.Address] = n.Name // a VF's own RDMA device
		}
		if len(n.Ports) > 0 {
			c.Ports[n.Name] = n.Ports[0].Number
		}
	}
}

// EnvIBHCA is NCCL's variable naming the RDMA devices it may use. The proxy
// sets it in the exact-match form, "=mlx5_0:1,mlx5_3:1": without the "=",
// NCCL reads each name as a prefix, and mlx5_1 also matches mlx5_10.
const EnvIBHCA = "NCCL_IB_HCA"

// Plans lists the pods of this node that carry a plan (the informer edge).
type Plans interface {
	Candidates() []Candidate
}

// Held says which pods already hold devices of a resource (the kubelet's
// podresources List): their plans are realized.
type Held interface {
	Holding(ctx context.Context, resource string) (map[string]bool, error)
}

// DefaultMaxFronts is Config.MaxFronts unless set.
const DefaultMaxFronts = 32

// Metrics are the proxy's Prometheus metrics.
type Metrics struct {
	Registry      *prometheus.Registry
	Preferred     *prometheus.CounterVec
	Registrations *prometheus.CounterVec
	Fronts        prometheus.Gauge
}

// NewMetrics registers the proxy's metrics.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Preferred: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nicaffinity_allocation_proxy_preferred_total",
			Help: "GetPreferredAllocation answers by resource and result: plan (the scheduler's plan), or why not (no-plan, devices-taken, unknown-device-ids, must-include, bad-plan, vendor-failed).",
		}, []string{"resource", "result"}),
		Registrations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nicaffinity_allocation_proxy_registrations_total",
			Help: "Registrations by side (vendor: a device plugin with the proxy; kubelet: the proxy with the kubelet) and result (ok, error, refused: invalid, over-cap: past the proxy's limit of fronted resources).",
		}, []string{"side", "result"}),
		Fronts: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nicaffinity_allocation_proxy_fronts",
			Help: "Resources the proxy fronts for the kubelet (at most its --max-fronts).",
		}),
	}
	m.Registry.MustRegister(m.Preferred, m.Registrations, m.Fronts,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

// Proxy is one node's allocation proxy.
type Proxy struct {
	cfg      Config
	plans    Plans
	held     Held
	recorder record.EventRecorder
	metrics  *Metrics

	// regMu serializes vendor registrations, and Run's cleanup with them:
	// once Run has returned (closed), no registration makes a front, so
	// no socket of ours is left in the kubelet's directory.
	regMu   sync.Mutex
	closed  bool // under regMu
	mu      sync.Mutex
	fronts  map[string]*front
	claimed map[string]time.Time // namespace/name/resource -> when its plan was handed out
	// handed is, per resource, the plan last handed to the kubelet and
	// not yet allocated, so that the Allocate that follows knows whose
	// plan it allocates. The kubelet admits one pod at a time and, per
	// container, asks GetPreferredAllocation, then Allocate: the next
	// Allocate of the resource is that container's. A handout serves that
	// one Allocate only, and only for exactly its devices: a later pod that
	// is given the same devices (the planned pod ended, an unplanned one
	// came) gets no NCCL_IB_HCA of another pod's plan.
	//
	// One exception keeps a pod's own containers whole: the kubelet hands
	// an init container's devices on to the app containers that need as
	// many (it asks no preference then), so an Allocate of exactly the
	// devices last allocated under a plan, within reuseWindow, while that
	// pod is still one of the node's live pods, is that pod's (allocated).
	handed    map[string]handout
	allocated map[string]handout
	now       func() time.Time
}

// handout is a plan handed to the kubelet for one resource.
type handout struct {
	pod Candidate
	// key is the resource and the plan's sorted devices (handoutKey).
	key string
	at  time.Time
}

// New builds a proxy; recorder may be nil (no Events).
func New(cfg Config, plans Plans, held Held, recorder record.EventRecorder, m *Metrics) *Proxy {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.PlanWait <= 0 {
		cfg.PlanWait = time.Second
	}
	if cfg.ClaimTTL <= 0 {
		cfg.ClaimTTL = 2 * time.Minute
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 30 * time.Second
	}
	if cfg.MaxFronts <= 0 {
		cfg.MaxFronts = DefaultMaxFronts
	}
	if m == nil {
		m = NewMetrics()
	}
	return &Proxy{cfg: cfg, plans: plans, held: held, recorder: recorder, metrics: m,
		fronts: map[string]*front{}, claimed: map[string]time.Time{}, handed: map[string]handout{}, allocated: map[string]handout{}, now: time.Now}
}

// Metrics returns the proxy's metrics.
func (p *Proxy) Metrics() *Metrics { return p.metrics }

// Run serves vendor registrations in VendorDir and keeps every front
// registered with the kubelet (again after a kubelet restart) until ctx ends.
// A proxy runs once: after Run returns, registrations are refused.
func (p *Proxy) Run(ctx context.Context) error {
	if err := os.MkdirAll(p.cfg.VendorDir, 0o750); err != nil {
		return err
	}
	// A new registration socket is what tells vendor plugins that watch
	// it (the NVIDIA and SR-IOV device plugins do) to register again:
	// after a proxy restart they come back on their own.
	sock := filepath.Join(p.cfg.VendorDir, filepath.Base(pluginapi.KubeletSocket))
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("registration socket: %w", err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterRegistrationServer(srv, &registration{p: p})
	go func() { _ = srv.Serve(l) }()
	klog.InfoS("Allocation proxy serving vendor registrations", "socket", sock, "kubeletDir", p.cfg.KubeletDir)

	defer func() {
		// Stop does not wait for handlers in flight: one may still be
		// making a front. regMu waits it out, and closed refuses any that
		// starts after.
		srv.Stop()
		_ = os.Remove(sock)
		p.regMu.Lock()
		defer p.regMu.Unlock()
		p.closed = true
		p.mu.Lock()
		for _, f := range p.fronts {
			f.stop()
		}
		p.fronts = map[string]*front{}
		p.mu.Unlock()
	}()
	tick := time.NewTicker(p.cfg.Poll)
	defer tick.Stop()
	var kubeletSock fileID
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		id := fileIDOf(p.kubeletSocket())
		restarted := id != (fileID{}) && kubeletSock != (fileID{}) && id != kubeletSock
		if id != (fileID{}) {
			kubeletSock = id
		}
		p.mu.Lock()
		fronts := make([]*front, 0, len(p.fronts))
		for _, f := range p.fronts {
			fronts = append(fronts, f)
		}
		p.mu.Unlock()
		for _, f := range fronts {
			// The kubelet removes every socket of its directory when it
			// starts: serve ours again and register again.
			served, err := f.serveAgain(restarted)
			if err != nil {
				klog.ErrorS(err, "Serving the kubelet again", "resource", f.resource)
				continue
			}
			if served {
				klog.InfoS("The kubelet restarted or our socket went: registering again", "resource", f.resource)
			}
			if !f.isRegistered() && p.registerFront(ctx, f) {
				// The kubelet that took the registration serves
				// kubelet.sock now; it is not the one stat'd above when it
				// started between that stat and the socket check (it wiped
				// ours). Remembering the older file would read as a restart
				// on the next tick and register again with the same
				// kubelet, which refuses it ("device plugin already
				// connected") and drops the resource's client.
				if now := fileIDOf(p.kubeletSocket()); now != (fileID{}) {
					kubeletSock = now
				}
			}
		}
	}
}

// kubeletSocket is the kubelet's registration socket.
func (p *Proxy) kubeletSocket() string {
	return filepath.Join(p.cfg.KubeletDir, filepath.Base(pluginapi.KubeletSocket))
}

// fileID tells a file from the one it replaced: inode numbers are reused
// at once on most file systems, change times are not.
type fileID struct {
	ino       uint64
	sec, nsec int64
}

// fileIDOf is the zero fileID when path does not exist.
func fileIDOf(path string) fileID {
	st, err := os.Stat(path)
	if err != nil {
		return fileID{}
	}
	s, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{sec: st.ModTime().UnixNano()}
	}
	return fileID{ino: s.Ino, sec: s.Ctim.Sec, nsec: s.Ctim.Nsec}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

type registration struct {
	pluginapi.UnimplementedRegistrationServer
	p *Proxy
}

// Register takes a vendor plugin's registration: its resource is fronted
// by a socket of the proxy's, registered with the kubelet in its place.
func (r *registration) Register(ctx context.Context, req *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	p := r.p
	// One registration at a time: a vendor's old front must be gone
	// before its new one serves the same socket name.
	p.regMu.Lock()
	defer p.regMu.Unlock()
	if p.closed {
		return nil, status.Error(codes.Unavailable, "the allocation proxy is stopping")
	}
	if err := validRegistration(req); err != nil {
		p.metrics.Registrations.WithLabelValues("vendor", "refused").Inc()
		klog.ErrorS(err, "Refused a vendor registration", "resource", req.GetResourceName(), "endpoint", req.GetEndpoint())
		return nil, err
	}
	// A vendor registering again has restarted: its old front goes first
	// (the new one serves the same socket name). A new resource past the
	// cap is refused: each front is a socket and goroutines.
	p.mu.Lock()
	old := p.fronts[req.ResourceName]
	if old == nil && len(p.fronts) >= p.cfg.MaxFronts {
		p.mu.Unlock()
		p.metrics.Registrations.WithLabelValues("vendor", "over-cap").Inc()
		err := fmt.Errorf("resource %.64q: the proxy already fronts %d resources, its limit (--max-fronts)", req.ResourceName, p.cfg.MaxFronts)
		klog.ErrorS(err, "Refused a vendor registration", "resource", req.ResourceName, "endpoint", req.Endpoint)
		if p.recorder != nil && p.cfg.NodeName != "" {
			ref := &corev1.ObjectReference{Kind: "Node", Name: p.cfg.NodeName, UID: types.UID(p.cfg.NodeName)}
			p.recorder.Eventf(ref, corev1.EventTypeWarning, "RegistrationRefused", "%v", err)
		}
		return nil, status.Error(codes.ResourceExhausted, err.Error())
	}
	p.mu.Unlock()
	if old != nil {
		same, err := old.swapVendor(req)
		if err == nil {
			p.metrics.Registrations.WithLabelValues("vendor", "ok").Inc()
			klog.InfoS("Vendor plugin registered again; the kubelet keeps its front", "resource", req.ResourceName, "endpoint", req.Endpoint)
			if !same {
				// PreStartRequired changed: the kubelet reads a plugin's
				// options only when it connects, so it must connect anew.
				if err := old.reconnect(); err != nil {
					klog.ErrorS(err, "Serving the kubelet again after the vendor's options changed", "resource", req.ResourceName)
				}
			}
			return &pluginapi.Empty{}, nil
		}
		p.mu.Lock()
		delete(p.fronts, req.ResourceName)
		p.mu.Unlock()
		old.stop()
	}
	f, err := p.newFront(req)
	if err != nil {
		p.metrics.Registrations.WithLabelValues("vendor", "error").Inc()
		return nil, err
	}
	p.mu.Lock()
	p.fronts[req.ResourceName] = f
	p.metrics.Fronts.Set(float64(len(p.fronts)))
	p.mu.Unlock()
	p.metrics.Registrations.WithLabelValues("vendor", "ok").Inc()
	klog.InfoS("Vendor plugin registered", "resource", req.ResourceName, "endpoint", req.Endpoint, "preferredAllocation", req.GetOptions().GetGetPreferredAllocationAvailable())
	// Registered with the kubelet now, and by Run's loop again after every
	// kubelet restart. Not in this call: a slow kubelet would hold the
	// vendor's registration (and, through regMu, every other vendor's)
	// past the vendor's own timeout, and a vendor that gives up registers
	// again.
	go p.registerFront(context.WithoutCancel(ctx), f)
	return &pluginapi.Empty{}, nil
}

// maxName bounds names from registrations (a DNS subdomain, a file name).
const maxName = 253

// validRegistration checks a registration as the kubelet's device manager
// does (an extended resource name: a qualified name outside
// kubernetes.io, which refuses NUL and other odd bytes), and the endpoint
// as a plain file name.
func validRegistration(req *pluginapi.RegisterRequest) error {
	switch {
	case req.GetVersion() != pluginapi.Version:
		return fmt.Errorf("device plugin API version %.64q: the proxy speaks %s", req.GetVersion(), pluginapi.Version)
	case len(req.GetResourceName()) > maxName || !isExtendedResourceName(req.GetResourceName()):
		return fmt.Errorf("resource name %.64q: not an extended resource name (<domain>/<name>, at most %d bytes, outside kubernetes.io)", req.GetResourceName(), maxName)
	case req.GetEndpoint() == "" || len(req.GetEndpoint()) > maxName || req.GetEndpoint() != filepath.Base(req.GetEndpoint()) || strings.HasPrefix(req.GetEndpoint(), "."):
		return fmt.Errorf("endpoint %.64q: want a socket file name in the plugin directory", req.GetEndpoint())
	}
	return nil
}

// isExtendedResourceName is the apiserver's rule for an extended resource
// name (k8s.io/kubernetes' v1helper.IsExtendedResourceName, which the proxy
// does not link the whole of Kubernetes for): a domain-prefixed name
// outside *kubernetes.io/ and requests., qualified once "requests." is put
// before it, as resource quota does.
func isExtendedResourceName(name string) bool {
	if !strings.Contains(name, "/") || strings.Contains(name, corev1.ResourceDefaultNamespacePrefix) ||
		strings.HasPrefix(name, corev1.DefaultResourceRequestsPrefix) {
		return false
	}
	return len(validation.IsQualifiedName(corev1.DefaultResourceRequestsPrefix+name)) == 0
}

// front is the proxy's device plugin for one resource: what the kubelet
// talks to, forwarding to the vendor's plugin.
type front struct {
	p        *Proxy
	resource string
	kind     Kind
	fronted  bool // the resource has plans (Kinds lists it)
	socket   string

	mu sync.Mutex
	// The vendor behind the front: swapped when the vendor registers
	// again, with swapped closed to tell ListAndWatch relays to follow.
	vendor  pluginapi.DevicePluginClient
	conn    *grpc.ClientConn
	opts    *pluginapi.DevicePluginOptions
	swapped chan struct{}
	srv     *grpc.Server
	stopped bool // replaced or shut down: never serves again
	// serving counts the front's (re)starts of its socket: a registration
	// answered after the socket it registered was served anew says nothing
	// of the new one.
	serving uint64
	// registered: the kubelet has taken the front's registration since
	// the front last (re)started serving.
	registered bool
	// holdUntil: no registration before then, while the kubelet may still
	// take one that timed out or still hold the socket served before
	// (registerFront, reconnect).
	holdUntil time.Time
}

func (p *Proxy) newFront(req *pluginapi.RegisterRequest) (*front, error) {
	conn, err := grpc.NewClient("unix://"+filepath.Join(p.cfg.VendorDir, req.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("vendor plugin socket %s: %w", req.Endpoint, err)
	}
	kind, fronted := p.cfg.Kinds[req.ResourceName]
	f := &front{p: p, resource: req.ResourceName, kind: kind, fronted: fronted, conn: conn, vendor: pluginapi.NewDevicePluginClient(conn),
		opts: req.GetOptions(), socket: filepath.Join(p.cfg.KubeletDir, FrontSocket(req.ResourceName)), swapped: make(chan struct{})}
	if f.opts == nil {
		f.opts = &pluginapi.DevicePluginOptions{}
	}
	if err := f.serve(time.Time{}); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return f, nil
}

// current is the vendor behind the front now, and a channel closed when
// it is swapped.
func (f *front) current() (pluginapi.DevicePluginClient, *pluginapi.DevicePluginOptions, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.vendor, f.opts, f.swapped
}

// swapVendor puts a vendor that registered again behind the running
// front. The kubelet keeps its connection to the front and its
// ListAndWatch stream (the relay follows the new vendor), so a vendor
// restart is no re-registration to the kubelet: the kubelet's device
// manager closes a resource's old client when the resource registers
// again, and an admission in flight then fails (TestRealKubeletRestarts).
// It reports whether the options the kubelet was given still hold.
func (f *front) swapVendor(req *pluginapi.RegisterRequest) (sameOptions bool, err error) {
	conn, err := grpc.NewClient("unix://"+filepath.Join(f.p.cfg.VendorDir, req.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false, fmt.Errorf("vendor plugin socket %s: %w", req.Endpoint, err)
	}
	opts := req.GetOptions()
	if opts == nil {
		opts = &pluginapi.DevicePluginOptions{}
	}
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		_ = conn.Close()
		return false, errors.New("front replaced or shut down")
	}
	old := f.conn
	sameOptions = f.opts.PreStartRequired == opts.PreStartRequired
	f.conn, f.vendor, f.opts = conn, pluginapi.NewDevicePluginClient(conn), opts
	close(f.swapped)
	f.swapped = make(chan struct{})
	f.mu.Unlock()
	_ = old.Close()
	return sameOptions, nil
}

// FrontSocket is the file name of the socket that fronts resource for the
// kubelet: readable (the name with "/" and "." as "_", cut to 40 bytes)
// and collision-free (a hash of the whole name): nvidia.com/gpu and
// nvidia/com.gpu read alike but never share a socket. It stays far below
// the 108 bytes a unix socket path may have.
func FrontSocket(resource string) string {
	readable := strings.NewReplacer("/", "_", ".", "_").Replace(resource)
	if len(readable) > 40 {
		readable = readable[:40]
	}
	sum := sha256.Sum256([]byte(resource))
	return "nicaffinity-" + readable + "-" + hex.EncodeToString(sum[:6]) + ".sock"
}

// serve (re)creates the front's socket in the kubelet's directory, to be
// registered with the kubelet from hold on.
func (f *front) serve(hold time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.serveLocked(hold)
}

// serveAgain serves the front's socket anew when the kubelet restarted or
// the socket is gone, and reports whether it did. The check is made under
// f.mu: serve removes the socket before it listens again, and a check in
// that window would serve a second time, without serve's hold, and
// register while the kubelet may still be connected.
func (f *front) serveAgain(restarted bool) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped || !restarted && exists(f.socket) {
		return false, nil
	}
	return true, f.serveLocked(time.Time{})
}

func (f *front) serveLocked(hold time.Time) error {
	if f.stopped {
		return errors.New("front replaced or shut down")
	}
	if f.srv != nil {
		f.srv.Stop()
	}
	_ = os.Remove(f.socket)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: f.socket, Net: "unix"})
	if err != nil {
		return fmt.Errorf("serving %s for the kubelet: %w", f.socket, err)
	}
	// The front removes its socket itself (above, and in stop). A
	// listener's own unlink would remove a newer socket of the same path:
	// a server stopped before its Serve goroutine ran closes the listener
	// only when that goroutine runs, after the next serve has listened.
	l.SetUnlinkOnClose(false)
	f.srv = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(f.srv, &frontServer{f: f})
	go func(s *grpc.Server) { _ = s.Serve(l) }(f.srv)
	f.serving++
	f.registered, f.holdUntil = false, hold
	return nil
}

// kubeletDisconnectWindow is how long the kubelet is given to let a
// front go whose ListAndWatch stream ended: its device plugin client
// disconnects as soon as the stream's receive fails, without a call or a
// timer in between.
const kubeletDisconnectWindow = time.Second

// reconnect makes the kubelet connect to the front anew, as it must to
// read options that changed. Registering the connected socket again would
// be refused, and leave the kubelet stuck (registerFront). So the front
// serves its socket anew, which ends the kubelet's ListAndWatch stream
// and with it the kubelet's client of the old socket, and Run's loop
// registers it again after kubeletDisconnectWindow. Until then the
// kubelet holds the resource's devices as unhealthy, as it does through
// any device plugin's restart.
func (f *front) reconnect() error {
	return f.serve(f.p.now().Add(kubeletDisconnectWindow))
}

func (f *front) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = true
	if f.srv != nil {
		f.srv.Stop()
		f.srv = nil
	}
	_ = os.Remove(f.socket)
	_ = f.conn.Close()
}

// kubeletConnectWindow is how long after a registration call timed out
// the kubelet may still take it: its device manager answers the call only
// once it has dialled the plugin back (for up to 10 s) and read its
// options, and it keeps the connection when our side gave up first.
const kubeletConnectWindow = 10 * time.Second

// registerFront registers f with the kubelet unless a registration that
// timed out may still be taken, and reports whether it registered.
//
// A second registration on a socket the kubelet is connected to is
// refused ("device plugin already connected"), and the refusal drops the
// kubelet's client of the connected endpoint as well: nothing then tells
// the kubelet when the front goes, it keeps offering the devices, and it
// refuses every later registration of the socket
// (kubernetes/kubernetes#139338). So after a call that may have reached
// the kubelet and failed (timed out, cancelled, refused) the front waits:
// the kubelet's ListAndWatch on the front marks it registered, and only
// when none comes within kubeletConnectWindow does it register again. A
// kubelet that cannot be reached (Unavailable) is tried at once.
//
// One registration of a front is in flight at a time (the vendor's
// registration and Run's loop both register): the call holds the others
// off for as long as it and the window after it may last.
func (p *Proxy) registerFront(ctx context.Context, f *front) bool {
	f.mu.Lock()
	now := p.now()
	if f.stopped || now.Before(f.holdUntil) {
		f.mu.Unlock()
		return false
	}
	f.holdUntil = now.Add(p.cfg.Timeout + kubeletConnectWindow)
	serving := f.serving
	f.mu.Unlock()

	err := p.registerWithKubelet(ctx, f)
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.serving != serving: // the socket was served anew since: that decides
		return false
	case err == nil:
		f.registered, f.holdUntil = true, time.Time{}
		return true
	case status.Code(err) == codes.Unavailable: // no kubelet to take it: try again at the next tick
		f.holdUntil = time.Time{}
	default: // timed out, cancelled or refused: the kubelet may have it
		f.holdUntil = p.now().Add(kubeletConnectWindow)
	}
	return false
}

// taken records that the kubelet holds the front's registration, and
// returns the count of the socket it holds (serving).
func (f *front) taken() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.registered, f.holdUntil = true, time.Time{}
	return f.serving
}

// lost records that the kubelet lets the front go, as it does when the
// front ends its ListAndWatch stream, unless the socket has been served
// anew since (serving). The front registers again once the kubelet has
// had kubeletDisconnectWindow to let it go: before, the kubelet would
// refuse it as connected.
func (f *front) lost(serving uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.serving == serving && !f.stopped {
		f.registered, f.holdUntil = false, f.p.now().Add(kubeletDisconnectWindow)
	}
}

func (f *front) isRegistered() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.registered
}

func (p *Proxy) registerWithKubelet(ctx context.Context, f *front) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+p.kubeletSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, vopts, _ := f.current()
	opts := &pluginapi.DevicePluginOptions{PreStartRequired: vopts.PreStartRequired, GetPreferredAllocationAvailable: true}
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: filepath.Base(f.socket), ResourceName: f.resource, Options: opts})
	if err != nil {
		p.metrics.Registrations.WithLabelValues("kubelet", "error").Inc()
		klog.ErrorS(err, "Registering with the kubelet; retrying", "resource", f.resource)
		return err
	}
	p.metrics.Registrations.WithLabelValues("kubelet", "ok").Inc()
	klog.InfoS("Registered with the kubelet", "resource", f.resource, "endpoint", filepath.Base(f.socket))
	return nil
}

// frontServer is the device plugin API the kubelet sees.
type frontServer struct {
	pluginapi.UnimplementedDevicePluginServer
	f *front
}

func (s *frontServer) GetDevicePluginOptions(ctx context.Context, e *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	ctx, cancel := context.WithTimeout(ctx, s.f.p.cfg.CallTimeout)
	defer cancel()
	var opts *pluginapi.DevicePluginOptions
	err := s.f.vendorCall(ctx, func(v pluginapi.DevicePluginClient) (err error) {
		opts, err = v.GetDevicePluginOptions(ctx, e)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := &pluginapi.DevicePluginOptions{PreStartRequired: opts.PreStartRequired, GetPreferredAllocationAvailable: true}
	return out, nil
}

// ListAndWatch relays the vendor's device lists, on one stream for the
// kubelet across vendor restarts: when the vendor's stream ends, the relay
// waits up to CallTimeout for the vendor to register again and follows the
// new one. The kubelet, whose device manager marks a resource unhealthy
// when its stream ends, sees nothing of a vendor restart. The vendor must
// send its first list within CallTimeout (a device plugin sends one at
// once); a vendor that hangs gets the stream cut. Later lists come when
// devices change, so only the first is timed.
//
// When the front ends the stream (the vendor stayed away, or hung), the
// kubelet lets the front go and never dials it again by itself, so the
// front registers again (a vendor that is still away fails that
// registration, and it is tried again until the vendor is back).
func (s *frontServer) ListAndWatch(e *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	// Only a kubelet that took the front's registration opens this
	// stream, whether or not its answer to the registration arrived.
	serving := s.f.taken()
	defer func() {
		if stream.Context().Err() == nil {
			s.f.lost(serving)
		}
	}()
	for {
		vendor, _, swapped := s.f.current()
		err := s.relay(vendor, e, stream)
		if stream.Context().Err() != nil || status.Code(err) == codes.DeadlineExceeded {
			return err
		}
		select {
		case <-swapped:
		case <-time.After(s.f.p.cfg.CallTimeout):
			return err
		case <-stream.Context().Done():
			return err
		}
		klog.InfoS("Vendor plugin registered again; relaying its device lists on the kubelet's stream", "resource", s.f.resource)
	}
}

// relay relays one vendor stream until it ends.
func (s *frontServer) relay(vendor pluginapi.DevicePluginClient, e *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	var late atomic.Bool
	first := time.AfterFunc(s.f.p.cfg.CallTimeout, func() { late.Store(true); cancel() })
	vs, err := vendor.ListAndWatch(ctx, e)
	if err != nil {
		first.Stop()
		return err
	}
	for {
		resp, err := vs.Recv()
		if first.Stop(); late.Load() {
			return status.Errorf(codes.DeadlineExceeded, "%s: the device plugin sent no device list within %s", s.f.resource, s.f.p.cfg.CallTimeout)
		}
		if err != nil {
			return err
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// vendorCall runs call against the vendor behind the front. When the
// vendor cannot be reached and registers again before ctx ends, it runs
// once more against the new one: a vendor restart between the kubelet's
// calls fails no admission.
func (f *front) vendorCall(ctx context.Context, call func(pluginapi.DevicePluginClient) error) error {
	vendor, _, swapped := f.current()
	err := call(vendor)
	if status.Code(err) != codes.Unavailable {
		return err
	}
	select {
	case <-swapped:
		vendor, _, _ = f.current()
		return call(vendor)
	case <-ctx.Done():
		return err
	}
}

func (s *frontServer) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.f.p.cfg.CallTimeout)
	defer cancel()
	var resp *pluginapi.AllocateResponse
	err := s.f.vendorCall(ctx, func(v pluginapi.DevicePluginClient) (err error) {
		resp, err = v.Allocate(ctx, req)
		return err
	})
	if !s.f.fronted {
		return resp, err
	}
	if err != nil {
		s.f.p.takeHandout(s.f.resource, nil) // that container's plan is spent
		return resp, err
	}
	s.f.p.setIBHCA(s.f, req, resp)
	return resp, nil
}

// setIBHCA adds NCCL_IB_HCA to each container response whose devices are a
// plan the proxy handed out: the plan's NICs for a PF plan (on the GPU
// resource), the allocated VFs' own RDMA devices for a VF plan (on the VF
// resource). Where the vendor set one, the pod sets its own, or the
// kubelet allocated other devices than the plan's, it sets none.
func (p *Proxy) setIBHCA(f *front, req *pluginapi.AllocateRequest, resp *pluginapi.AllocateResponse) {
	for i, cr := range req.GetContainerRequests() {
		if i >= len(resp.GetContainerResponses()) || resp.ContainerResponses[i] == nil {
			break
		}
		out := resp.ContainerResponses[i]
		if _, set := out.Envs[EnvIBHCA]; set {
			continue
		}
		h, ok := p.takeHandout(f.resource, cr.GetDevicesIds())
		if !ok || h.pod.SetsIBHCA {
			continue
		}
		var hcas []string
		switch f.kind {
		case KindGPU:
			if p.hasVFPlan(h.pod) {
				continue // the VF resource's Allocate names the pod's NICs
			}
			for _, nic := range h.pod.Plan.NICs {
				hcas = append(hcas, p.hca(nic))
			}
		case KindVF:
			for _, vf := range cr.GetDevicesIds() {
				name, ok := p.cfg.VFRDMA[vf]
				if !ok {
					hcas = nil // a VF without an RDMA device of its own: say nothing
					break
				}
				hcas = append(hcas, p.hca(name))
			}
		}
		if len(hcas) == 0 {
			continue
		}
		if out.Envs == nil {
			out.Envs = map[string]string{}
		}
		out.Envs[EnvIBHCA] = "=" + strings.Join(hcas, ",")
		klog.V(2).InfoS("NCCL_IB_HCA from the plan", "pod", h.pod.Key(), "resource", f.resource, "value", out.Envs[EnvIBHCA])
	}
}

// hca is an RDMA device with its port, as NCCL_IB_HCA names it.
func (p *Proxy) hca(name string) string {
	port := p.cfg.Ports[name]
	if port <= 0 {
		port = 1
	}
	return fmt.Sprintf("%s:%d", name, port)
}

// hasVFPlan reports whether the pod asks for a VF resource the proxy fronts.
func (p *Proxy) hasVFPlan(c Candidate) bool {
	for res, n := range c.Requests {
		if n > 0 && p.cfg.Kinds[res] == KindVF {
			return true
		}
	}
	return false
}

func handoutKey(resource string, ids []string) string {
	return resource + "\x00" + strings.Join(slices.Sorted(slices.Values(ids)), "\x00")
}

// recordHandout remembers whose plan the devices ids of resource are,
// for the Allocate that follows; it replaces the resource's last one.
func (p *Proxy) recordHandout(resource string, ids []string, pod Candidate) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.handed[resource] = handout{pod: pod, key: handoutKey(resource, ids), at: p.now()}
}

// reuseWindow bounds how long after a planned container's Allocate the
// kubelet may hand the same devices on to the same pod's next container.
const reuseWindow = 30 * time.Second

// takeHandout is the plan last handed out for resource, if it names
// exactly these devices and is recent (ClaimTTL); it is used up either
// way: the kubelet's next Allocate of the resource is another container's.
// Without one, the same pod's next container reusing the devices (see
// handed) gets its pod's plan again.
func (p *Proxy) takeHandout(resource string, ids []string) (handout, bool) {
	key := handoutKey(resource, ids)
	p.mu.Lock()
	h, ok := p.handed[resource]
	delete(p.handed, resource)
	now := p.now()
	if ok && h.key == key && now.Sub(h.at) <= p.cfg.ClaimTTL {
		p.allocated[resource] = handout{pod: h.pod, key: key, at: now}
		p.mu.Unlock()
		return h, true
	}
	last, had := p.allocated[resource]
	p.mu.Unlock()
	if ok || !had || last.key != key || now.Sub(last.at) > reuseWindow || !p.live(last.pod.UID) {
		return handout{}, false
	}
	return last, true
}

// live reports whether the pod is still one of the node's live pods (not
// finished, not going).
func (p *Proxy) live(uid types.UID) bool {
	for _, c := range p.plans.Candidates() {
		if c.UID == uid {
			return true
		}
	}
	return false
}

func (s *frontServer) PreStartContainer(ctx context.Context, req *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, s.f.p.cfg.CallTimeout)
	defer cancel()
	var resp *pluginapi.PreStartContainerResponse
	err := s.f.vendorCall(ctx, func(v pluginapi.DevicePluginClient) (err error) {
		resp, err = v.PreStartContainer(ctx, req)
		return err
	})
	return resp, err
}

// GetPreferredAllocation answers with the plan of the pod being admitted,
// else with the vendor's preference, else with none (the kubelet chooses).
// It never fails: a failure here would fail the pod's admission.
func (s *frontServer) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.GetContainerRequests() {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: s.f.p.preferred(ctx, s.f, cr)})
	}
	return resp, nil
}

func (p *Proxy) preferred(ctx context.Context, f *front, cr *pluginapi.ContainerPreferredAllocationRequest) []string {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	if f.fronted && !p.cfg.PlanLookupOff {
		req := Request{Resource: f.resource, Kind: f.kind, Available: cr.AvailableDeviceIDs, MustInclude: cr.MustIncludeDeviceIDs, Size: int(cr.AllocationSize)}
		cands := p.candidates(ctx, f.resource)
		ch := Choose(req, cands, p.cfg.VFPF)
		// A request that finds no plan first, its own or not, looks again
		// until PlanWait: a planned pod bound before it may not be in the
		// informer yet, and an unplanned pod's devices must keep off that
		// pod's plan too.
		for wait := time.After(p.cfg.PlanWait); ch.Reason == ReasonNoPlan; {
			select {
			case <-wait:
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
				cands = p.candidates(ctx, f.resource)
				ch = Choose(req, cands, p.cfg.VFPF)
				continue
			}
			break
		}
		if ch.Reason == ReasonNoPlan {
			if ch.Pod != nil {
				// Most likely this unplanned pod's request: the next
				// request of this size is another pod's.
				p.claim(ch.Pod.Key() + "/" + f.resource)
			}
			// The vendor chooses, but not among other pods' plans.
			cr = &pluginapi.ContainerPreferredAllocationRequest{AvailableDeviceIDs: Unplanned(req, cands),
				MustIncludeDeviceIDs: cr.MustIncludeDeviceIDs, AllocationSize: cr.AllocationSize}
		}
		if ch.IDs != nil {
			p.claim(ch.Pod.Key() + "/" + f.resource)
			p.recordHandout(f.resource, ch.IDs, *ch.Pod)
			p.metrics.Preferred.WithLabelValues(f.resource, "plan").Inc()
			klog.V(2).InfoS("Preferred allocation from the plan", "pod", ch.Pod.Key(), "resource", f.resource, "devices", ch.IDs)
			return ch.IDs
		}
		p.metrics.Preferred.WithLabelValues(f.resource, ch.Reason).Inc()
		klog.V(2).InfoS("No plan to follow; the device plugin's preference", "resource", f.resource, "size", cr.AllocationSize, "reason", ch.Message)
		if ch.Pod != nil && ch.Reason != ReasonNoPlan && p.recorder != nil {
			ref := &corev1.ObjectReference{Kind: "Pod", Namespace: ch.Pod.Namespace, Name: ch.Pod.Name, UID: ch.Pod.UID}
			p.recorder.Eventf(ref, corev1.EventTypeWarning, "PlanNotFollowed", "%s: %s; the device plugin chooses instead", f.resource, ch.Message)
		}
	}
	if _, opts, _ := f.current(); !opts.GetPreferredAllocationAvailable {
		return nil
	}
	var vr *pluginapi.PreferredAllocationResponse
	err := f.vendorCall(ctx, func(v pluginapi.DevicePluginClient) (err error) {
		vr, err = v.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{cr}})
		return err
	})
	if err != nil || len(vr.GetContainerResponses()) != 1 {
		p.metrics.Preferred.WithLabelValues(f.resource, ReasonVendorFailed).Inc()
		klog.ErrorS(err, "The device plugin gave no preference; the kubelet chooses", "resource", f.resource)
		return nil
	}
	return vr.ContainerResponses[0].DeviceIDs
}

// candidates are the node's planned pods that hold none of the resource
// yet and whose plan was not just handed out.
func (p *Proxy) candidates(ctx context.Context, resource string) []Candidate {
	held, err := p.held.Holding(ctx, resource)
	if err != nil {
		klog.ErrorS(err, "Reading which pods hold devices; counting handed-out plans only", "resource", resource)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	for k, at := range p.claimed {
		if now.Sub(at) > p.cfg.ClaimTTL {
			delete(p.claimed, k)
		}
	}
	var out []Candidate
	for _, c := range p.plans.Candidates() {
		if c.Requests[resource] <= 0 || held[c.Key()] {
			continue
		}
		if _, ok := p.claimed[c.Key()+"/"+resource]; ok {
			continue
		}
		out = append(out, c)
	}
	return out
}

func (p *Proxy) claim(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.claimed[key] = p.now()
}
