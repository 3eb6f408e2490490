// Package exporter publishes a node's GPU-NIC topology and free devices as a
// NodeResourceTopology, and checks what each pod really got.
package exporter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/apis/config"
	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/podresources"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// FieldManager is the server-side apply field manager of the exporter.
const FieldManager = nrt.ExporterFieldManager

// Config tunes an Exporter.
type Config struct {
	NodeName     string
	Resources    nrt.Resources
	RDMAPrefixes []string
	// MaxLevel is the default worst GPU-NIC level that counts as aligned.
	MaxLevel              topology.Level
	TopologyManagerPolicy string
	TopologyManagerScope  string
	// ResyncPeriod re-reads everything even without pod events.
	ResyncPeriod time.Duration
	// MinWriteInterval spaces writes: at most one per interval.
	MinWriteInterval time.Duration
	// MaxBackoff caps the wait between retries after an error.
	MaxBackoff time.Duration
	// SyncTimeout bounds one sync: discovery, the podresources calls, the
	// apply and the pod patches. A sync that runs past it fails and is
	// retried; a hung driver or apiserver never holds the loop.
	SyncTimeout time.Duration
	// Rails says where NIC zones' rails come from (docs/nrt-schema.md);
	// the zero value publishes none.
	Rails nrt.Rails
	// InterfaceAddrs reads a netdev's addresses for rails by subnet; nil
	// reads the host's (the exporter then needs the host's network
	// namespace).
	InterfaceAddrs func(netdev string) ([]netip.Prefix, error)
}

// unhealthyAfter is how many resync periods without a successful sync make
// the exporter unhealthy and unready.
const unhealthyAfter = 3

// DefaultConfig returns the defaults of the deployment guides.
func DefaultConfig(node string) Config {
	return Config{
		NodeName: node, Resources: nrt.DefaultResources(), RDMAPrefixes: config.DefaultRDMAResourcePrefixes(),
		MaxLevel: config.DefaultLevel(), TopologyManagerPolicy: "none", TopologyManagerScope: "container",
		ResyncPeriod: 60 * time.Second, MinWriteInterval: time.Second, MaxBackoff: 30 * time.Second,
		SyncTimeout: 30 * time.Second,
	}
}

// Discoverer reads the node's topology (sysfs + NVML on a real node).
type Discoverer interface {
	Discover() (*topology.Topology, error)
}

// DiscovererFunc adapts a function.
type DiscovererFunc func() (*topology.Topology, error)

// Discover calls f.
func (f DiscovererFunc) Discover() (*topology.Topology, error) { return f() }

// Publisher writes a complete NodeResourceTopology.
type Publisher interface {
	Publish(ctx context.Context, obj *v1alpha2.NodeResourceTopology) error
}

// ApplyPublisher writes with server-side apply under FieldManager, without
// forcing: when another writer (NFD's topology-updater, the Resource
// Topology Exporter) owns fields of the node's object, the apiserver refuses
// the apply with a conflict and the object stays theirs. Publish then
// returns a *ForeignOwnerError naming them.
type ApplyPublisher struct {
	Client NRTClient
}

// ForeignOwnerError says that another field manager owns the node's object,
// so the exporter does not write it.
type ForeignOwnerError struct {
	Object   string
	Managers []string
}

func (e *ForeignOwnerError) Error() string {
	return fmt.Sprintf("NodeResourceTopology %s is managed by %s: nicaffinity's exporter does not overwrite another writer's object (turn that writer off on this node and delete the object to hand it over; docs/nrt-schema.md, Coexistence)",
		e.Object, nrt.QuoteManagers(e.Managers))
}

// Publish applies obj whole.
func (p ApplyPublisher) Publish(ctx context.Context, obj *v1alpha2.NodeResourceTopology) error {
	body, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	err = p.Client.ApplyNRT(ctx, obj.Name, body)
	if !apierrors.IsConflict(err) {
		return err
	}
	// The conflict names the managers in prose; the object names them exactly.
	cur, getErr := p.Client.GetNRT(ctx, obj.Name)
	if getErr != nil {
		return fmt.Errorf("%w (and reading the object to name its other writers: %v)", err, getErr)
	}
	others := nrt.OtherManagers(cur)
	if len(others) == 0 {
		return err // a conflict with ourselves cannot be: report it as it came
	}
	return &ForeignOwnerError{Object: obj.Name, Managers: others}
}

// Exporter is one node's publisher.
type Exporter struct {
	cfg      Config
	discover Discoverer
	source   podresources.Source
	kube     Kube
	pub      Publisher
	metrics  *Metrics
	events   chan *corev1.Event
	// writingEvents is set while Run's event writer runs.
	writingEvents atomic.Bool

	trigger chan struct{}
	// started and lastSync (unix nanoseconds) tell health: see Healthy.
	started  atomic.Int64
	lastSync atomic.Int64
	now      func() time.Time
	// discovering is set while a discovery runs (one at a time: a hung one
	// is not joined by another).
	discovering atomic.Bool

	mu            sync.Mutex
	topo          *topology.Topology
	verifier      *Verifier
	lastPublished *v1alpha2.NodeResourceTopology
	lastProblems  string
	// foreign is set while another writer owns the node's object; the
	// exporter then tries again only at a resync (retryForeign), not on
	// every pod event.
	foreign      *ForeignOwnerError
	retryForeign bool
	podLister    corelisters.PodLister
}

// New builds an exporter. kube and pub may be nil for --no-publish use (Build only).
func New(cfg Config, d Discoverer, src podresources.Source, kube Kube, pub Publisher, m *Metrics) *Exporter {
	if m == nil {
		m = NewMetrics()
	}
	if cfg.SyncTimeout <= 0 {
		cfg.SyncTimeout = 30 * time.Second
	}
	e := &Exporter{cfg: cfg, discover: d, source: src, kube: kube, pub: pub, metrics: m, trigger: make(chan struct{}, 1), events: make(chan *corev1.Event, eventQueue), now: time.Now}
	e.started.Store(e.now().UnixNano())
	return e
}

// Ready reports whether the node's object is current: a sync succeeded
// within the last unhealthyAfter resync periods and wrote the object.
func (e *Exporter) Ready() bool { return e.Readiness() == nil }

// Readiness is nil when the node's object is current, else the reason: not
// healthy, nothing published yet, or another writer owns the object. The
// last is no failure of the exporter (it stays healthy and keeps checking
// pods) but the node's object is not nicaffinity's.
func (e *Exporter) Readiness() error {
	if err := e.Healthy(); err != nil {
		return err
	}
	e.mu.Lock()
	foreign := e.foreign
	e.mu.Unlock()
	if foreign != nil {
		return foreign
	}
	if e.lastSync.Load() == 0 {
		return errors.New("no NodeResourceTopology published yet")
	}
	return nil
}

// Healthy is nil while syncs succeed: it fails once unhealthyAfter resync
// periods pass without a successful sync (since the start, before the
// first), naming how long, so that the kubelet restarts an exporter that
// is stuck and the node's object stops being served as current.
func (e *Exporter) Healthy() error {
	limit := unhealthyAfter * e.cfg.ResyncPeriod
	last := e.lastSync.Load()
	if last == 0 {
		if since := time.Duration(e.now().UnixNano() - e.started.Load()); since > limit {
			return fmt.Errorf("no successful sync in the %s since the start (limit %s)", since.Round(time.Second), limit)
		}
		return nil
	}
	if since := time.Duration(e.now().UnixNano() - last); since > limit {
		return fmt.Errorf("last successful sync %s ago (limit %s)", since.Round(time.Second), limit)
	}
	return nil
}

// Metrics returns the exporter's metrics.
func (e *Exporter) Metrics() *Metrics { return e.metrics }

// Build reads the node once and returns the object it would publish.
func (e *Exporter) Build(ctx context.Context) (*v1alpha2.NodeResourceTopology, []nrt.Problem, devices.Snapshot, error) {
	obj, problems, snap, _, err := e.build(ctx)
	return obj, problems, snap, err
}

func (e *Exporter) build(ctx context.Context) (*v1alpha2.NodeResourceTopology, []nrt.Problem, devices.Snapshot, claimed, error) {
	topo, err := e.topology(ctx)
	if err != nil {
		return nil, nil, devices.Snapshot{}, claimed{}, err
	}
	snap, err := e.source.Snapshot(ctx)
	if err != nil {
		e.metrics.SourceErrors.Inc()
		return nil, nil, snap, claimed{}, err
	}
	gpusOffered := false
	for _, d := range snap.Allocatable {
		gpusOffered = gpusOffered || d.Resource == e.cfg.Resources.GPU
	}
	cl := e.claimedDevices(ctx, gpusOffered)
	obj, problems := nrt.Build(nrt.Input{
		Node: e.cfg.NodeName, Topology: topo, Snapshot: snap, Claimed: cl.all, DRAPublished: cl.published, Resources: e.cfg.Resources,
		TopologyManagerPolicy: e.cfg.TopologyManagerPolicy, TopologyManagerScope: e.cfg.TopologyManagerScope,
		Rails: e.rails(topo), Admitting: e.admitting(snap),
	})
	for _, p := range cl.problems {
		problems = append(problems, nrt.Problem{Device: "ResourceSlices", Reason: p})
	}
	return obj, problems, snap, cl, nil
}

// admitting are the pods of snap that hold fewer devices of a resource the
// kubelet offers than their spec asks for (nrt.Input.Admitting). A pod the
// pod informer does not know yet is counted as it is listed.
func (e *Exporter) admitting(snap devices.Snapshot) map[string]bool {
	e.mu.Lock()
	lister := e.podLister
	e.mu.Unlock()
	if lister == nil {
		return nil
	}
	offered := map[string]bool{}
	for _, d := range snap.Allocatable {
		offered[d.Resource] = true
	}
	var out map[string]bool
	for _, p := range snap.Pods {
		pod, err := lister.Pods(p.Namespace).Get(p.Name)
		if err != nil {
			continue
		}
		held := map[string]int64{}
		for _, d := range p.Devices {
			held[d.Resource]++
		}
		for name, q := range resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}) {
			if offered[string(name)] && held[string(name)] < q.Value() {
				if out == nil {
					out = map[string]bool{}
				}
				out[p.Namespace+"/"+p.Name] = true
				break
			}
		}
	}
	return out
}

// topology rediscovers the node (cheap: a few hundred sysfs reads), keeping the
// last good topology when discovery fails. Discovery (NVML, sysfs) takes
// no context, so it runs on a goroutine of its own and the caller stops
// waiting when ctx ends; while a discovery hangs no other starts.
func (e *Exporter) topology(ctx context.Context) (*topology.Topology, error) {
	type result struct {
		t   *topology.Topology
		err error
	}
	var t *topology.Topology
	var err error
	if !e.discovering.CompareAndSwap(false, true) {
		err = errors.New("the previous discovery has not returned")
	} else {
		done := make(chan result, 1)
		go func() {
			defer e.discovering.Store(false)
			t, err := e.discover.Discover()
			done <- result{t, err}
		}()
		select {
		case r := <-done:
			t, err = r.t, r.err
		case <-ctx.Done():
			err = fmt.Errorf("discovery: %w", context.Cause(ctx))
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		if e.topo != nil {
			klog.ErrorS(err, "Topology discovery failed; keeping the last good topology")
			return e.topo, nil
		}
		return nil, err
	}
	if e.topo == nil || !reflect.DeepEqual(e.topo, t) {
		e.topo = t
		e.verifier = NewVerifier(e.cfg.NodeName, t, e.cfg.Resources, e.cfg.RDMAPrefixes, e.cfg.MaxLevel)
		klog.InfoS("Node topology", "node", e.cfg.NodeName, "gpus", len(t.GPUs), "rdmaDevices", len(t.NICs), "source", t.Source, "nvml", t.NVML)
	}
	return e.topo, nil
}

// Trigger asks for a sync soon.
func (e *Exporter) Trigger() {
	select {
	case e.trigger <- struct{}{}:
	default:
	}
}

// Run publishes until ctx ends: on pod events of this node (debounced to one
// write per MinWriteInterval), every ResyncPeriod, and after errors with backoff.
func (e *Exporter) Run(ctx context.Context) error {
	if e.kube == nil || e.pub == nil {
		return errors.New("exporter: Run needs Kubernetes clients")
	}
	e.writingEvents.Store(true)
	go e.writeEvents(ctx)

	selector := fields.OneTermEqualSelector("spec.nodeName", e.cfg.NodeName).String()
	// The wrapper lets the reflector see whether the client can stream
	// watch-list (fakes cannot), as client-go's generated informers do.
	informer := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return e.kube.ListPods(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return e.kube.WatchPods(ctx, o)
		},
	}, e.kube), &corev1.Pod{}, e.cfg.ResyncPeriod, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { e.Trigger() },
		UpdateFunc: func(old, cur any) { e.podChanged(old, cur) },
		DeleteFunc: func(any) { e.Trigger() },
	}); err != nil {
		return err
	}
	e.mu.Lock()
	e.podLister = corelisters.NewPodLister(informer.GetIndexer())
	e.mu.Unlock()
	// Publishing does not wait for the pod cache: the informer only adds
	// triggers and the pods to verify, and its first listing triggers a sync.
	go informer.RunWithContext(ctx)

	resync := time.NewTicker(e.cfg.ResyncPeriod)
	defer resync.Stop()
	var last time.Time
	backoff := time.Duration(0)
	retry := time.NewTimer(0) // first sync right away
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-e.trigger:
		case <-resync.C:
			// The safety net also rewrites an object someone deleted or garbled.
			e.Forget()
		case <-retry.C:
		}
		// At most one write per MinWriteInterval: wait out the rest, and
		// let the triggers that arrive meanwhile fold into this sync.
		if wait := e.cfg.MinWriteInterval - time.Since(last); wait > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
			select {
			case <-e.trigger:
			default:
			}
		}
		last = time.Now()
		if err := e.Sync(ctx); err != nil {
			backoff = min(max(2*backoff, e.cfg.MinWriteInterval), e.cfg.MaxBackoff)
			klog.ErrorS(err, "Sync failed; serving the last good object and retrying", "node", e.cfg.NodeName, "retryIn", backoff)
			retry.Reset(backoff)
			continue
		}
		backoff = 0
	}
}

// podChanged triggers on what changes allocations: phase and deletion.
func (e *Exporter) podChanged(old, cur any) {
	o, ok1 := old.(*corev1.Pod)
	c, ok2 := cur.(*corev1.Pod)
	if !ok1 || !ok2 || o.Status.Phase != c.Status.Phase || o.DeletionTimestamp != c.DeletionTimestamp ||
		len(o.Status.ContainerStatuses) != len(c.Status.ContainerStatuses) {
		e.Trigger()
	}
}

// Sync reads the node once, publishes the object if its content changed, and
// verifies the pods.
func (e *Exporter) Sync(ctx context.Context) error {
	ctx, cancel := context.WithTimeoutCause(ctx, e.cfg.SyncTimeout, fmt.Errorf("sync took longer than %s", e.cfg.SyncTimeout))
	defer cancel()
	start := time.Now()
	obj, problems, snap, cl, err := e.build(ctx)
	if err != nil {
		e.metrics.Publishes.WithLabelValues("error").Inc()
		return err
	}
	e.logProblems(problems)
	written, err := e.publish(ctx, obj)
	var foreign *ForeignOwnerError
	switch {
	case errors.As(err, &foreign):
		e.metrics.Publishes.WithLabelValues("foreign").Inc()
	case err != nil:
		e.metrics.Publishes.WithLabelValues("error").Inc()
		return err
	case written:
		e.metrics.Publishes.WithLabelValues("written").Inc()
		e.metrics.PublishDuration.Observe(time.Since(start).Seconds())
		e.metrics.LastPublish.SetToCurrentTime()
	default:
		e.metrics.Publishes.WithLabelValues("unchanged").Inc()
	}
	if err == nil {
		e.setForeign(nil)
	}
	e.lastSync.Store(e.now().UnixNano())
	e.verifyPods(ctx, snap, cl)
	return nil
}

// setForeign records whether another writer owns the node's object, and
// says so when that changes: a log line, an Event on the Node, the
// blocked metric, the readiness reason.
func (e *Exporter) setForeign(f *ForeignOwnerError) {
	e.mu.Lock()
	prev := e.foreign
	e.foreign, e.retryForeign = f, false
	e.mu.Unlock()
	if (prev == nil) == (f == nil) && (f == nil || slices.Equal(prev.Managers, f.Managers)) {
		return
	}
	e.metrics.Blocked.Reset()
	node := corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: e.cfg.NodeName, UID: types.UID(e.cfg.NodeName)}
	if f == nil {
		klog.InfoS("NodeResourceTopology is nicaffinity's again: writing it", "node", e.cfg.NodeName)
		e.emit(node, corev1.EventTypeNormal, "TopologyPublished", "nicaffinity's exporter writes this node's NodeResourceTopology again")
		return
	}
	for _, m := range f.Managers {
		e.metrics.Blocked.WithLabelValues(m).Set(1)
	}
	klog.ErrorS(f, "Not writing the node's NodeResourceTopology", "node", e.cfg.NodeName, "managers", f.Managers)
	e.emit(node, corev1.EventTypeWarning, "TopologyOwnedElsewhere", f.Error())
}

func (e *Exporter) logProblems(problems []nrt.Problem) {
	text := fmt.Sprint(problems)
	e.mu.Lock()
	changed := text != e.lastProblems
	e.lastProblems = text
	e.mu.Unlock()
	if !changed {
		return
	}
	for _, p := range problems {
		klog.InfoS("Device problem", "node", e.cfg.NodeName, "device", p.Device, "reason", p.Reason)
	}
}

// publish applies obj with server-side apply when its content differs from
// what was last written. The object is complete before it is sent: a write
// either lands whole or not at all.
func (e *Exporter) publish(ctx context.Context, obj *v1alpha2.NodeResourceTopology) (bool, error) {
	e.mu.Lock()
	same := e.lastPublished != nil && reflect.DeepEqual(e.lastPublished.Zones, obj.Zones) && reflect.DeepEqual(e.lastPublished.Attributes, obj.Attributes)
	foreign, retry := e.foreign, e.retryForeign
	e.mu.Unlock()
	if same {
		return false, nil
	}
	if foreign != nil && !retry {
		return false, foreign
	}
	// The heartbeat goes on the copy sent, not on what later objects are
	// compared with: content decides a write, the resync's Forget renews
	// the heartbeat at least every resync period.
	sent := obj.DeepCopy()
	sent.Attributes = append(sent.Attributes, v1alpha2.AttributeInfo{Name: nrt.AttrHeartbeat, Value: e.now().UTC().Format(time.RFC3339)})
	if err := e.pub.Publish(ctx, sent); err != nil {
		var foreign *ForeignOwnerError
		if errors.As(err, &foreign) {
			e.setForeign(foreign)
			return false, foreign
		}
		return false, fmt.Errorf("applying NodeResourceTopology %s: %w", obj.Name, err)
	}
	e.mu.Lock()
	e.lastPublished = obj
	e.mu.Unlock()
	return true, nil
}

// Forget drops the memory of the last write, so the next sync writes again
// (after someone deleted or garbled the object).
func (e *Exporter) Forget() {
	e.mu.Lock()
	e.lastPublished = nil
	e.retryForeign = true
	e.mu.Unlock()
}

// verifyPods checks what each pod of the node really got: its device-plugin
// devices from the kubelet's snapshot and its DRA devices from cl.
func (e *Exporter) verifyPods(ctx context.Context, snap devices.Snapshot, cl claimed) {
	e.mu.Lock()
	v, lister := e.verifier, e.podLister
	e.mu.Unlock()
	if v == nil || lister == nil {
		return
	}
	pods := snap.Pods
	for key := range cl.byPod {
		ns, name, _ := strings.Cut(key, "/")
		if !slices.ContainsFunc(pods, func(p devices.Pod) bool { return p.Namespace == ns && p.Name == name }) {
			pods = append(pods, devices.Pod{Namespace: ns, Name: name})
		}
	}
	for _, p := range pods {
		pod, err := lister.Pods(p.Namespace).Get(p.Name)
		if err != nil {
			continue // the informer has not seen it yet; the next sync will
		}
		dev := cl.byPod[p.Namespace+"/"+p.Name]
		view := PodView{Namespace: p.Namespace, Name: p.Name, Devices: p.Devices, Claimed: dev.PCI, Annotations: pod.Annotations, Pod: pod}
		verdict, ok := v.Verify(view)
		verdict.Problems = append(verdict.Problems, dev.Problems...)
		if !ok {
			continue
		}
		value := annotations.Marshal(verdict.Observed)
		if pod.Annotations[annotations.ObservedKey] == value {
			continue
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{annotations.ObservedKey: value}}})
		if err := e.kube.PatchPod(ctx, p.Namespace, p.Name, patch); err != nil {
			klog.ErrorS(err, "Writing the observed placement", "pod", klog.KObj(pod))
			continue
		}
		for _, prob := range verdict.Problems {
			klog.InfoS("Pod device problem", "pod", klog.KObj(pod), "problem", prob)
		}
		if !verdict.RDMA {
			continue
		}
		aligned := fmt.Sprint(verdict.Observed.Aligned)
		e.metrics.Verifications.WithLabelValues(verdict.Observed.Level, aligned).Inc()
		ref := corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, ResourceVersion: pod.ResourceVersion}
		if verdict.Observed.Aligned {
			e.emit(ref, corev1.EventTypeNormal, "Aligned", verdict.Message())
		} else {
			e.emit(ref, corev1.EventTypeWarning, "Misaligned", verdict.Message())
		}
	}
}

// rails is the rail configuration with, for rails by subnet, each NIC's
// first IPv4 prefix of its netdevs read now (addresses change with the
// network's configuration, not the PCIe tree).
func (e *Exporter) rails(topo *topology.Topology) nrt.Rails {
	r := e.cfg.Rails
	if r.Source != nrt.RailFromSubnet {
		return r
	}
	addrs := e.cfg.InterfaceAddrs
	if addrs == nil {
		addrs = hostAddrs
	}
	r.Subnets = map[string]string{}
	for _, n := range topo.NICs {
		for _, dev := range n.Netdevs {
			ps, err := addrs(dev)
			if err != nil {
				continue // no such netdev here: no rail, nothing guessed
			}
			if i := slices.IndexFunc(ps, func(p netip.Prefix) bool { return p.Addr().Is4() }); i >= 0 {
				r.Subnets[n.Name] = ps[i].String()
				break
			}
		}
	}
	return r
}

// hostAddrs reads a netdev's addresses from the network namespace the
// exporter runs in.
func hostAddrs(netdev string) ([]netip.Prefix, error) {
	ifc, err := net.InterfaceByName(netdev)
	if err != nil {
		return nil, err
	}
	as, err := ifc.Addrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, a := range as {
		if ipn, ok := a.(*net.IPNet); ok {
			if addr, ok := netip.AddrFromSlice(ipn.IP); ok {
				ones, _ := ipn.Mask.Size()
				out = append(out, netip.PrefixFrom(addr.Unmap(), ones))
			}
		}
	}
	return out, nil
}
