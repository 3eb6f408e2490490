package allocproxy

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	kubeletplugin "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"

	"github.com/nicaffinity/nicaffinity/internal/gpualloc"
	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

const (
	gpuRes = "nvidia.com/gpu"
	vfRes  = "openshift.io/sriov_highnet"
)

// testKubelet is the kubelet's side of the device plugin API: the kubelet's
// own registration server and plugin client
// (pkg/kubelet/cm/devicemanager/plugin/v1beta1) on a real unix socket, and
// the device manager's admission order on top (available devices, the
// plugin's preferred allocation when it offers one, Allocate). The device
// manager itself is not used: its only exported constructor serves at the
// fixed /var/lib/kubelet/device-plugins/kubelet.sock, which a test cannot
// own.
type testKubelet struct {
	t   *testing.T
	dir string
	srv kubeletplugin.Server

	mu        sync.Mutex
	plugins   map[string]kubeletplugin.DevicePlugin
	devices   map[string][]string
	allocated map[string]map[string]string // resource -> device -> pod
	holding   map[string]map[string]bool   // pod -> resources
	envs      map[string]map[string]string // pod/resource -> the Allocate response's env
	// preStart: PreStartRequired as each resource's plugin gave it when it
	// connected (the device manager reads options only then).
	preStart map[string]bool
	// connectDelay holds every connection back this long after the
	// plugin's options are read, as a loaded kubelet can: the plugin's
	// Register call may time out before the kubelet answers it, and the
	// kubelet takes the registration all the same.
	connectDelay time.Duration
	// refuseConnected refuses a plugin on a socket that is connected
	// already, as the device manager does ("device plugin already
	// connected").
	refuseConnected bool
}

func startKubelet(t *testing.T, dir string) *testKubelet {
	k := &testKubelet{t: t, dir: dir, plugins: map[string]kubeletplugin.DevicePlugin{}, devices: map[string][]string{},
		allocated: map[string]map[string]string{}, holding: map[string]map[string]bool{}, envs: map[string]map[string]string{}, preStart: map[string]bool{}}
	k.start()
	return k
}

func (k *testKubelet) start() {
	srv, err := kubeletplugin.NewServer(klog.Background(), filepath.Join(k.dir, "kubelet.sock"), k, k)
	if err != nil {
		k.t.Fatal(err)
	}
	if err := srv.Start(klog.Background()); err != nil {
		k.t.Fatal(err)
	}
	k.mu.Lock()
	k.srv = srv
	k.plugins = map[string]kubeletplugin.DevicePlugin{}
	k.mu.Unlock()
	k.t.Cleanup(func() { _ = srv.Stop(klog.Background()) })
}

// restart stops the kubelet and starts it again: at start it removes every
// socket of its directory, as the kubelet does.
func (k *testKubelet) restart() {
	_ = k.srv.Stop(klog.Background())
	k.start()
}

// CleanupPluginDirectory removes every plugin socket, as the device manager does.
func (k *testKubelet) CleanupPluginDirectory(_ klog.Logger, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() != "kubelet.sock" {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	return nil
}

func (k *testKubelet) PluginConnected(ctx context.Context, resource string, p kubeletplugin.DevicePlugin) error {
	opts, err := p.API().GetDevicePluginOptions(ctx, &pluginapi.Empty{})
	if err != nil {
		return err
	}
	k.mu.Lock()
	delay := k.connectDelay
	k.mu.Unlock()
	time.Sleep(delay)
	k.mu.Lock()
	defer k.mu.Unlock()
	if old, ok := k.plugins[resource]; ok && k.refuseConnected && old.SocketPath() == p.SocketPath() {
		return fmt.Errorf("device plugin already connected: %s", p.SocketPath())
	}
	k.plugins[resource] = p
	k.preStart[resource] = opts.PreStartRequired
	return nil
}

func (k *testKubelet) PluginDisconnected(_ klog.Logger, resource, socket string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if p, ok := k.plugins[resource]; ok && p.SocketPath() == socket {
		delete(k.plugins, resource)
	}
}

func (k *testKubelet) PluginListAndWatchReceiver(_ klog.Logger, resource string, resp *pluginapi.ListAndWatchResponse) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var ids []string
	for _, d := range resp.Devices {
		if d.Health == pluginapi.Healthy {
			ids = append(ids, d.ID)
		}
	}
	k.devices[resource] = ids
}

// Holding implements Held: the pods holding devices of resource, as the
// kubelet's podresources List reports them.
func (k *testKubelet) Holding(_ context.Context, resource string) (map[string]bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string]bool{}
	for pod, res := range k.holding {
		if res[resource] {
			out[pod] = true
		}
	}
	return out, nil
}

// plugin waits until a plugin for resource is connected and has listed devices.
func (k *testKubelet) plugin(resource string) kubeletplugin.DevicePlugin {
	k.t.Helper()
	var p kubeletplugin.DevicePlugin
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		k.mu.Lock()
		defer k.mu.Unlock()
		p = k.plugins[resource]
		return p != nil && len(k.devices[resource]) > 0, nil
	}); err != nil {
		k.t.Fatalf("no %s plugin connected to the kubelet", resource)
	}
	return p
}

func (k *testKubelet) available(resource string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, id := range k.devices[resource] {
		if _, taken := k.allocated[resource][id]; !taken {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// preferred is the device manager's first step: the plugin's preference
// when it offers one, else (or when the preference is unusable) the first
// available devices.
func (k *testKubelet) preferred(resource string, size int) []string {
	k.t.Helper()
	p := k.plugin(resource)
	available := k.available(resource)
	ctx := context.Background()
	opts, err := p.API().GetDevicePluginOptions(ctx, &pluginapi.Empty{})
	if err != nil {
		k.t.Fatalf("GetDevicePluginOptions: %v", err)
	}
	if opts.GetPreferredAllocationAvailable {
		resp, err := p.API().GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
			{AvailableDeviceIDs: available, AllocationSize: int32(size)}}})
		if err != nil {
			k.t.Fatalf("GetPreferredAllocation failed, which fails the pod's admission: %v", err)
		}
		if ids := resp.ContainerResponses[0].DeviceIDs; len(ids) == size && subset(ids, available) {
			return ids
		}
	}
	return available[:size]
}

func (k *testKubelet) allocate(pod, resource string, ids []string) {
	k.t.Helper()
	p := k.plugin(resource)
	resp, err := p.API().Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		k.t.Fatalf("Allocate %v for %s: %v", ids, pod, err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(resp.GetContainerResponses()) == 1 {
		k.envs[pod+"/"+resource] = resp.ContainerResponses[0].Envs
	}
	if k.allocated[resource] == nil {
		k.allocated[resource] = map[string]string{}
	}
	for _, id := range ids {
		k.allocated[resource][id] = pod
	}
	if k.holding[pod] == nil {
		k.holding[pod] = map[string]bool{}
	}
	k.holding[pod][resource] = true
}

// ibHCA is the NCCL_IB_HCA the container of pod got for res ("" none).
func (k *testKubelet) ibHCA(pod, res string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.envs[pod+"/"+res][EnvIBHCA]
}

// admit runs one container's allocation through the device plugin.
func (k *testKubelet) admit(pod, resource string, size int) []string {
	k.t.Helper()
	ids := k.preferred(resource, size)
	k.allocate(pod, resource, ids)
	return ids
}

func subset(ids, of []string) bool {
	for _, id := range ids {
		if !slices.Contains(of, id) {
			return false
		}
	}
	return true
}

// vendor is a stand-in vendor device plugin speaking the device plugin API
// on a unix socket in the proxy's directory. For GPUs its preference is
// go-gpuallocator's best-effort policy, the NVIDIA device plugin's. It
// registers again whenever its registration socket is created anew, as
// the NVIDIA and SR-IOV device plugins do.
type vendor struct {
	pluginapi.UnimplementedDevicePluginServer
	t        *testing.T
	dir      string
	endpoint string
	resource string
	ids      []string
	prefer   func(available, must []string, size int) []string
	hang     bool
	preStart atomic.Bool // PreStartRequired in its options

	mu          sync.Mutex
	allocations [][]string
	stop        context.CancelFunc
}

func startVendor(t *testing.T, dir, endpoint, resource string, ids []string, prefer func(available, must []string, size int) []string) *vendor {
	v := &vendor{t: t, dir: dir, endpoint: endpoint, resource: resource, ids: ids, prefer: prefer}
	sock := filepath.Join(dir, endpoint)
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, v)
	go func() { _ = srv.Serve(l) }()
	ctx, cancel := context.WithCancel(context.Background())
	v.stop = func() { cancel(); srv.Stop(); _ = os.Remove(sock) }
	t.Cleanup(v.stop)
	go v.registerLoop(ctx)
	return v
}

func (v *vendor) registerLoop(ctx context.Context) {
	reg := filepath.Join(v.dir, "kubelet.sock")
	var done fileID
	for ctx.Err() == nil {
		if id := fileIDOf(reg); id != (fileID{}) && id != done && v.register(ctx) == nil {
			done = id
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (v *vendor) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return v.options(), nil
}

func (v *vendor) options() *pluginapi.DevicePluginOptions {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: v.prefer != nil, PreStartRequired: v.preStart.Load()}
}

// register registers the vendor with the proxy once.
func (v *vendor) register(ctx context.Context) error {
	conn, err := grpc.NewClient("unix://"+filepath.Join(v.dir, "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: v.endpoint, ResourceName: v.resource, Options: v.options()})
	return err
}

func (v *vendor) ListAndWatch(_ *pluginapi.Empty, s grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	resp := &pluginapi.ListAndWatchResponse{}
	for _, id := range v.ids {
		resp.Devices = append(resp.Devices, &pluginapi.Device{ID: id, Health: pluginapi.Healthy})
	}
	if err := s.Send(resp); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

func (v *vendor) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	if v.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.ContainerRequests {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{
			DeviceIDs: v.prefer(cr.AvailableDeviceIDs, cr.MustIncludeDeviceIDs, int(cr.AllocationSize))})
	}
	return resp, nil
}

func (v *vendor) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, cr := range req.ContainerRequests {
		v.allocations = append(v.allocations, cr.DevicesIds)
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(cr.DevicesIds, ",")}})
	}
	return resp, nil
}

func (v *vendor) lastAllocation() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.allocations) == 0 {
		return nil
	}
	return v.allocations[len(v.allocations)-1]
}

// testPlans are the node's planned pods, as the informer edge lists them.
type testPlans struct {
	mu    sync.Mutex
	cands []Candidate
}

func (p *testPlans) Candidates() []Candidate {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.cands)
}

func (p *testPlans) add(c Candidate) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cands = append(p.cands, c)
}

// env is one node: the kubelet, the proxy, and the GPU and VF vendors.
type env struct {
	t        *testing.T
	topo     *topology.Topology
	kubelet  *testKubelet
	plans    *testPlans
	events   *record.FakeRecorder
	proxy    *Proxy
	stop     context.CancelFunc
	done     chan error
	cfg      Config
	gpu, vfs *vendor
	vfIDs    []string
}

// HGX H100: GPU i named GPU-<i> by the device plugin; NIC mlx5_i beside it,
// each with two VFs 0000:f<i>:00.2 and .3.
func startEnv(t *testing.T) *env { return startEnvWith(t, nil) }

// startEnvWith is startEnv with the proxy's configuration edited before it
// starts (a restart to change it would race the vendors' first
// registrations).
func startEnvWith(t *testing.T, edit func(*Config)) *env {
	topo, err := machines.Discover(t.TempDir(), machines.HGXH100)
	if err != nil {
		t.Fatal(err)
	}
	for i := range topo.GPUs {
		topo.GPUs[i].UUID = fmt.Sprintf("GPU-%d", i)
	}
	e := &env{t: t, topo: topo, plans: &testPlans{}, events: record.NewFakeRecorder(100)}
	base := t.TempDir() // short: unix socket paths are at most 107 bytes
	kubeletDir, vendorDir := filepath.Join(base, "k"), filepath.Join(base, "v")
	for _, d := range []string{kubeletDir, vendorDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	e.kubelet = startKubelet(t, kubeletDir)
	vfPF := map[string]string{}
	for i := range topo.GPUs {
		for _, fn := range []string{"2", "3"} {
			id := fmt.Sprintf("0000:f%d:00.%s", i, fn)
			vfPF[id] = fmt.Sprintf("mlx5_%d", i)
			e.vfIDs = append(e.vfIDs, id)
		}
	}
	vfRDMA := map[string]string{}
	for _, id := range e.vfIDs {
		vfRDMA[id] = "mlx5_vf" + strings.NewReplacer(":", "", ".", "").Replace(id)
	}
	e.cfg = Config{KubeletDir: kubeletDir, VendorDir: vendorDir, Kinds: map[string]Kind{gpuRes: KindGPU, vfRes: KindVF}, VFPF: vfPF, VFRDMA: vfRDMA,
		Ports: map[string]int{"mlx5_3": 2}, Timeout: 500 * time.Millisecond, Poll: 20 * time.Millisecond}
	if edit != nil {
		edit(&e.cfg)
	}
	e.startProxy()
	var gpuIDs []string
	for i := range topo.GPUs {
		gpuIDs = append(gpuIDs, gpualloc.GPUID(topo, i))
	}
	e.gpu = startVendor(t, vendorDir, "nvidia-gpu.sock", gpuRes, gpuIDs, e.bestEffort)
	e.vfs = startVendor(t, vendorDir, "sriov.sock", vfRes, e.vfIDs, nil)
	return e
}

func (e *env) bestEffort(available, must []string, size int) []string {
	return gpualloc.BestEffortIDs(e.topo, available, must, size)
}

func (e *env) startProxy() {
	p, done := New(e.cfg, e.plans, e.kubelet, e.events, nil), make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	e.proxy, e.stop, e.done = p, cancel, done
	// p and done, not e's fields: a restart replaces those.
	go func() { done <- p.Run(ctx) }()
	e.t.Cleanup(e.stopProxy)
}

func (e *env) stopProxy() {
	if e.stop == nil {
		return
	}
	e.stop()
	if err := <-e.done; err != nil {
		e.t.Errorf("proxy Run: %v", err)
	}
	e.stop = nil
}

// plan adds a pod whose plan is GPUs (by index) and their NICs, created age
// seconds after t0.
func (e *env) plan(name string, age int, gpus []int, vfs int64) {
	c := Candidate{Namespace: "ml", Name: name, UID: types.UID("uid-ml-" + typesSafe(name)), Created: t0.Add(time.Duration(age) * time.Second),
		Plan: annotations.Allocation{Node: "n"}, Requests: map[string]int64{gpuRes: int64(len(gpus))}}
	for _, g := range gpus {
		c.Plan.GPUs = append(c.Plan.GPUs, e.topo.GPUs[g].PCI.Address)
		c.Plan.UUIDs = append(c.Plan.UUIDs, e.topo.GPUs[g].UUID)
		c.Plan.NICs = append(c.Plan.NICs, fmt.Sprintf("mlx5_%d", g))
	}
	if vfs > 0 {
		c.Requests[vfRes] = vfs
	}
	e.plans.add(c)
}

func typesSafe(s string) string { return strings.ReplaceAll(s, "/", "-") }

func ids(prefix string, idx ...int) []string {
	var out []string
	for _, i := range idx {
		out = append(out, fmt.Sprintf("%s%d", prefix, i))
	}
	return out
}

func (e *env) preferredCount(resource, result string) float64 {
	return testutil.ToFloat64(e.proxy.Metrics().Preferred.WithLabelValues(resource, result))
}

// TestProxyFollowsPlans: the kubelet gets each pod's plan, back to back;
// pods without a plan get the vendor's choice; a plan whose GPUs are taken
// falls back with the reason recorded; VFs follow the planned NICs.
func TestProxyFollowsPlans(t *testing.T) {
	e := startEnv(t)
	e.kubelet.plugin(gpuRes)
	// The vendor alone would hand out other GPUs than the plans.
	if got := e.bestEffort(e.kubelet.available(gpuRes), nil, 2); len(got) != 2 || slices.Equal(got, ids("GPU-", 2, 3)) {
		t.Fatalf("vendor preference %v: the test needs one that is not the plan", got)
	}
	e.plan("a", 1, []int{2, 3}, 0)
	e.plan("b", 2, []int{6, 7}, 0)
	if got := e.kubelet.admit("ml/a", gpuRes, 2); !slices.Equal(got, ids("GPU-", 2, 3)) {
		t.Errorf("pod a got %v, want its plan GPU-2, GPU-3", got)
	}
	if got := e.kubelet.admit("ml/b", gpuRes, 2); !slices.Equal(got, ids("GPU-", 6, 7)) {
		t.Errorf("pod b got %v, want its plan GPU-6, GPU-7", got)
	}
	if got := e.gpu.lastAllocation(); !slices.Equal(got, ids("GPU-", 6, 7)) {
		t.Errorf("the vendor allocated %v, want the plan", got)
	}

	// No plan of that size: the vendor's best-effort choice.
	want := e.bestEffort(e.kubelet.available(gpuRes), nil, 1)
	if got := e.kubelet.admit("ml/unplanned", gpuRes, 1); !slices.Equal(got, want) {
		t.Errorf("a pod without a plan got %v, want the vendor's %v", got, want)
	}

	// A plan whose GPU is taken (by b): fall back, say why, name the pod.
	e.plan("late", 3, []int{7}, 0)
	want = e.bestEffort(e.kubelet.available(gpuRes), nil, 1)
	if got := e.kubelet.admit("ml/late", gpuRes, 1); !slices.Equal(got, want) {
		t.Errorf("a pod whose plan is taken got %v, want the vendor's %v", got, want)
	}
	if n := e.preferredCount(gpuRes, ReasonTaken); n != 1 {
		t.Errorf("devices-taken fallbacks = %v, want 1", n)
	}
	select {
	case ev := <-e.events.Events:
		if !strings.Contains(ev, "PlanNotFollowed") || !strings.Contains(ev, "ml/late") {
			t.Errorf("event %q", ev)
		}
	default:
		t.Error("no Event on the pod whose plan was not followed")
	}

	// VFs: the pod's planned NIC's VFs.
	e.plan("vf", 4, []int{5}, 2)
	if got := e.kubelet.admit("ml/vf", gpuRes, 1); !slices.Equal(got, ids("GPU-", 5)) {
		t.Errorf("pod vf got GPUs %v, want GPU-5", got)
	}
	if got := e.kubelet.admit("ml/vf", vfRes, 2); !slices.Equal(got, []string{"0000:f5:00.2", "0000:f5:00.3"}) {
		t.Errorf("pod vf got VFs %v, want mlx5_5's", got)
	}
	if n := e.preferredCount(gpuRes, "plan"); n != 3 {
		t.Errorf("GPU plans followed = %v, want 3", n)
	}
}

// TestProxyRestarts: the vendor plugin, the kubelet and the proxy each
// restart; every allocation after goes through, plans followed, and a
// restart of the proxy between GetPreferredAllocation and Allocate loses
// nothing.
func TestProxyRestarts(t *testing.T) {
	e := startEnv(t)

	// The vendor restarts (a new socket) and registers again.
	e.gpu.stop()
	e.gpu = startVendor(t, e.cfg.VendorDir, "nvidia-gpu-2.sock", gpuRes, ids("GPU-", 0, 1, 2, 3, 4, 5, 6, 7), e.bestEffort)
	e.plan("after-vendor", 1, []int{4}, 0)
	waitFor(t, "the kubelet to reach the restarted vendor", func() bool { return e.tryAdmit("ml/after-vendor", 1, ids("GPU-", 4)) })

	// The kubelet restarts: it removes every socket; the proxy serves and
	// registers again.
	e.kubelet.restart()
	e.plan("after-kubelet", 2, []int{5}, 0)
	if got := e.kubelet.admit("ml/after-kubelet", gpuRes, 1); !slices.Equal(got, ids("GPU-", 5)) {
		t.Errorf("after the kubelet restart: %v, want GPU-5", got)
	}

	// The proxy restarts between the kubelet's GetPreferredAllocation and
	// its Allocate.
	e.plan("across-proxy", 3, []int{6, 7}, 0)
	preferred := e.kubelet.preferred(gpuRes, 2)
	if !slices.Equal(preferred, ids("GPU-", 6, 7)) {
		t.Fatalf("preferred %v, want the plan", preferred)
	}
	e.stopProxy()
	e.startProxy()
	waitFor(t, "the kubelet to reach the vendor through the new proxy", func() bool {
		p := e.kubelet.plugin(gpuRes)
		_, err := p.API().GetDevicePluginOptions(context.Background(), &pluginapi.Empty{})
		return err == nil
	})
	e.kubelet.allocate("ml/across-proxy", gpuRes, preferred)
	if got := e.gpu.lastAllocation(); !slices.Equal(got, ids("GPU-", 6, 7)) {
		t.Errorf("after the proxy restart the vendor allocated %v, want the plan", got)
	}
	e.plan("after-proxy", 4, []int{3}, 0)
	if got := e.kubelet.admit("ml/after-proxy", gpuRes, 1); !slices.Equal(got, ids("GPU-", 3)) {
		t.Errorf("after the proxy restart: %v, want GPU-3", got)
	}
}

// TestProxyRegistrationTakenLate: a kubelet that takes the front's
// registration after the proxy's call to it has timed out. Registering the
// same socket again would be refused, and the refusal drops the kubelet's
// client of the connected front, so the kubelet would never see the front
// go. The proxy waits for the kubelet's ListAndWatch instead, and when
// the proxy stops the kubelet loses the resource.
func TestProxyRegistrationTakenLate(t *testing.T) {
	e := startEnv(t)
	waitFor(t, "the kubelet to take the first proxy's registration", func() bool { return e.kubelet.connected(gpuRes) })
	e.stopProxy()
	waitFor(t, "the kubelet to lose the first proxy's GPUs", func() bool { return !e.kubelet.connected(gpuRes) })
	e.kubelet.mu.Lock()
	e.kubelet.connectDelay, e.kubelet.refuseConnected = 3*e.cfg.Timeout, true
	e.kubelet.mu.Unlock()
	e.startProxy()
	waitFor(t, "the kubelet to take the slow registration", func() bool { return e.kubelet.connected(gpuRes) })
	// Long enough for the proxy to poll many times.
	time.Sleep(2 * e.kubelet.connectDelay)
	if n := testutil.ToFloat64(e.proxy.Metrics().Registrations.WithLabelValues("kubelet", "ok")) + testutil.ToFloat64(e.proxy.Metrics().Registrations.WithLabelValues("kubelet", "error")); n > 2 {
		t.Errorf("the proxy registered with the kubelet %v times; want one per resource", n)
	}
	e.stopProxy()
	waitFor(t, "the kubelet to lose the stopped proxy's GPUs", func() bool { return !e.kubelet.connected(gpuRes) })
}

// TestProxyVendorOptionsChange: the vendor registers again with
// PreStartRequired changed. The kubelet reads a plugin's options only when
// it connects, and refuses a second registration of a socket it is
// connected to (which would leave it stuck), so the front serves anew and
// registers again once the kubelet has let the old connection go.
func TestProxyVendorOptionsChange(t *testing.T) {
	e := startEnv(t)
	e.kubelet.mu.Lock()
	e.kubelet.refuseConnected = true
	e.kubelet.mu.Unlock()
	waitFor(t, "the kubelet to take the front's registration", func() bool { return e.kubelet.connected(gpuRes) })
	if e.kubelet.preStartRequired(gpuRes) {
		t.Fatal("PreStartRequired before the vendor asked for it")
	}
	e.gpu.preStart.Store(true)
	if err := e.gpu.register(context.Background()); err != nil {
		t.Fatalf("the vendor's second registration: %v", err)
	}
	waitFor(t, "the kubelet to connect again and read PreStartRequired", func() bool { return e.kubelet.preStartRequired(gpuRes) })
	e.plan("after-options", 1, []int{2}, 0)
	waitFor(t, "an admission through the front", func() bool { return e.tryAdmit("ml/after-options", 1, ids("GPU-", 2)) })
	if n := testutil.ToFloat64(e.proxy.Metrics().Registrations.WithLabelValues("kubelet", "error")); n != 0 {
		t.Errorf("%v registrations with the kubelet failed; want none", n)
	}
	e.stopProxy()
	waitFor(t, "the kubelet to lose the stopped proxy's GPUs", func() bool { return !e.kubelet.connected(gpuRes) })
}

// TestProxyVendorAwayLong: the vendor stays away longer than the relay
// waits for it, so the front's stream ends and the kubelet lets the front
// go. When the vendor registers again, the kubelet must be given the front
// again, or it never offers the resource again.
func TestProxyVendorAwayLong(t *testing.T) {
	e := startEnvWith(t, func(c *Config) { c.CallTimeout = 300 * time.Millisecond })
	waitFor(t, "the kubelet to take the front's registration", func() bool { return e.kubelet.connected(gpuRes) })
	e.gpu.stop()
	waitFor(t, "the kubelet to let the front go", func() bool { return !e.kubelet.connected(gpuRes) })
	e.gpu = startVendor(t, e.cfg.VendorDir, "nvidia-gpu-2.sock", gpuRes, ids("GPU-", 0, 1, 2, 3, 4, 5, 6, 7), e.bestEffort)
	e.plan("after-away", 1, []int{4}, 0)
	waitFor(t, "an admission through the front", func() bool {
		return e.kubelet.connected(gpuRes) && e.tryAdmit("ml/after-away", 1, ids("GPU-", 4))
	})
}

func (k *testKubelet) preStartRequired(resource string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.plugins[resource]
	return ok && k.preStart[resource]
}

// connected is whether the kubelet has a plugin for resource.
func (k *testKubelet) connected(resource string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.plugins[resource]
	return ok
}

// tryAdmit admits when the kubelet's connection works and reports whether
// the pod got want.
func (e *env) tryAdmit(pod string, size int, want []string) bool {
	p := e.kubelet.plugin(gpuRes)
	if _, err := p.API().GetDevicePluginOptions(context.Background(), &pluginapi.Empty{}); err != nil {
		return false
	}
	got := e.kubelet.admit(pod, gpuRes, size)
	if !slices.Equal(got, want) {
		e.t.Errorf("%s got %v, want %v", pod, got, want)
	}
	return true
}

// TestProxyNeverBlocksAdmission: a vendor whose preference never comes and
// no plan: the kubelet still gets an answer (none: it chooses) once the
// proxy's timeout passes, and the pod is admitted.
func TestProxyNeverBlocksAdmission(t *testing.T) {
	e := startEnv(t)
	e.gpu.hang = true
	done := make(chan []string, 1)
	go func() { done <- e.kubelet.admit("ml/stuck", gpuRes, 2) }()
	select {
	case got := <-done:
		if len(got) != 2 {
			t.Errorf("admitted with %v", got)
		}
	case <-time.After(30 * time.Second): // a hang guard, far above the 0.5 s timeout
		t.Fatal("admission hangs behind a vendor that never answers")
	}
	if n := e.preferredCount(gpuRes, ReasonVendorFailed); n != 1 {
		t.Errorf("vendor-failed = %v, want 1", n)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// TestProxySetsIBHCA: a pod admitted on its plan gets NCCL_IB_HCA in
// NCCL's exact-match form naming its planned NICs with their ports; a VF
// pod gets it on the VF resource, naming the RDMA devices of the VFs it
// got; a pod that sets its own, and a pod without a plan, get none.
func TestProxySetsIBHCA(t *testing.T) {
	e := startEnv(t)
	e.kubelet.plugin(gpuRes)
	env := e.kubelet.ibHCA
	e.plan("a", 1, []int{2, 3}, 0)
	e.kubelet.admit("ml/a", gpuRes, 2)
	if got := env("ml/a", gpuRes); got != "=mlx5_2:1,mlx5_3:2" {
		t.Errorf("pod a: NCCL_IB_HCA %q, want =mlx5_2:1,mlx5_3:2", got)
	}
	e.plan("own", 2, []int{1}, 0)
	e.plans.mu.Lock()
	e.plans.cands[len(e.plans.cands)-1].SetsIBHCA = true
	e.plans.mu.Unlock()
	e.kubelet.admit("ml/own", gpuRes, 1)
	if got := env("ml/own", gpuRes); got != "" {
		t.Errorf("a pod that sets its own NCCL_IB_HCA got %q from the proxy", got)
	}
	e.kubelet.admit("ml/unplanned", gpuRes, 1)
	if got := env("ml/unplanned", gpuRes); got != "" {
		t.Errorf("a pod without a plan got NCCL_IB_HCA %q", got)
	}
	e.plan("vf", 4, []int{5}, 2)
	e.kubelet.admit("ml/vf", gpuRes, 1)
	if got := env("ml/vf", gpuRes); got != "" {
		t.Errorf("a VF pod got NCCL_IB_HCA %q on the GPU resource", got)
	}
	e.kubelet.admit("ml/vf", vfRes, 2)
	if got := env("ml/vf", vfRes); got != "=mlx5_vf0000f5002:1,mlx5_vf0000f5003:1" {
		t.Errorf("pod vf: NCCL_IB_HCA %q on the VF resource, want its VFs' RDMA devices", got)
	}
	// The vendor's own env is kept.
	e.plans.mu.Lock()
	e.plans.cands = nil
	e.plans.mu.Unlock()
	if got := e.kubelet.envs["ml/a/"+gpuRes]["NVIDIA_VISIBLE_DEVICES"]; got != "GPU-2,GPU-3" {
		t.Errorf("the vendor's NVIDIA_VISIBLE_DEVICES became %q", got)
	}
}

// TestProxyIBHCAOnlyForItsPod: NCCL_IB_HCA goes with the Allocate that
// follows its plan's handout, once. When the planned pod ends and another
// tenant's unplanned pod is given the same devices (the kubelet asks no
// preference when the devices left are exactly the size), or a VF pod is
// given the PF plan's GPUs, that container gets none of the first pod's
// value.
func TestProxyIBHCAOnlyForItsPod(t *testing.T) {
	e := startEnv(t)
	e.kubelet.plugin(gpuRes)
	env := e.kubelet.ibHCA
	e.plan("a", 1, []int{2, 3}, 0)
	got := e.kubelet.admit("ml/a", gpuRes, 2)
	if v := env("ml/a", gpuRes); v != "=mlx5_2:1,mlx5_3:2" {
		t.Fatalf("pod a: NCCL_IB_HCA %q, want its plan's", v)
	}
	// The kubelet hands an init container's devices on to the pod's app
	// container without asking a preference: the same pod, its plan.
	e.kubelet.allocate("ml/a-app", gpuRes, got)
	if v := env("ml/a-app", gpuRes); v != "=mlx5_2:1,mlx5_3:2" {
		t.Errorf("pod a's next container on the same devices: NCCL_IB_HCA %q, want its plan's", v)
	}
	// Pod a ends; another tenant's pod is given a's devices with no
	// preference asked, well within the claim TTL.
	e.plans.mu.Lock()
	e.plans.cands = nil
	e.plans.mu.Unlock()
	e.kubelet.allocate("other/b", gpuRes, got)
	if v := env("other/b", gpuRes); v != "" {
		t.Errorf("another tenant's pod on the same devices got NCCL_IB_HCA %q (pod a's)", v)
	}
	// A VF pod's GPUs equal to a PF plan's handed out just before to a
	// container whose Allocate never came: none either.
	e.plan("c", 2, []int{0, 1}, 0)
	ids := e.kubelet.preferred(gpuRes, 2)
	e.plans.mu.Lock()
	e.plans.cands = nil
	e.plans.mu.Unlock()
	e.kubelet.allocate("ml/somethingelse", gpuRes, ids[:1])
	e.kubelet.allocate("other/vf", gpuRes, ids)
	if v := env("other/vf", gpuRes); v != "" {
		t.Errorf("a pod allocated after another container's Allocate got NCCL_IB_HCA %q", v)
	}
}

// TestProxyWaitsForLatePlan: a plan the proxy's informer brings only after
// the kubelet asked (both watch the same binding) is still followed, if it
// comes within PlanWait.
func TestProxyWaitsForLatePlan(t *testing.T) {
	e := startEnv(t)
	e.kubelet.plugin(gpuRes)
	go func() {
		time.Sleep(50 * time.Millisecond)
		e.plan("late", 1, []int{6, 7}, 0)
	}()
	if got := e.kubelet.admit("ml/late", gpuRes, 2); !slices.Equal(got, ids("GPU-", 6, 7)) {
		t.Errorf("pod late got %v, want its plan GPU-6, GPU-7, which came 50 ms after the request", got)
	}
}
