package schedulerrun

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/informers/internalinterfaces"
	schedulinginformers "k8s.io/client-go/informers/scheduling/v1beta1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/scheduler"
	"k8s.io/kubernetes/pkg/scheduler/backend/queue"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// A settler lets a harness step the scheduler and tell when it has caught
// up. Two things make a scheduler's decisions depend on timing rather than
// on the cluster's state:
//
//   - which pod it pops next depends on which events its queue has
//     processed: an event still in an informer's buffer has not moved the
//     pods it would move;
//   - what a scheduling cycle sees depends on which writes of the node side
//     (kubelets, exporters) its informers and plugins have received.
//
// So the scheduler pops a pod only when the harness allows (Step), and
// every handler registered on the scheduler's pod and NodeResourceTopology
// informers keeps a View of the objects it has processed, which the harness
// compares with what the cluster holds (View.Digest). A harness that steps
// only when every view is current sees decisions that follow from the state
// alone.
type settler struct {
	// tokens lets the loop pop; popped says it has (the entity is in
	// flight), so that a harness never lets it pop twice for one entity.
	tokens  chan struct{}
	popped  chan struct{}
	waiting atomic.Int32
	closed  chan struct{}
	once    sync.Once
	queue   *queue.PriorityQueue

	mu       sync.Mutex
	podViews []*View
	// groupViews are the PodGroup handlers' views: a failed pod group's
	// status write is the event that requeues it.
	groupViews []*View
	dynViews   map[schema.GroupVersionResource][]*View
	// changed is closed and replaced whenever a view changes, so a harness
	// can wait for the next change instead of polling.
	changed chan struct{}
}

func newSettler() *settler {
	return &settler{tokens: make(chan struct{}), popped: make(chan struct{}), closed: make(chan struct{}), dynViews: map[schema.GroupVersionResource][]*View{}, changed: make(chan struct{})}
}

func (s *settler) close() { s.once.Do(func() { close(s.closed) }) }

func (s *settler) notify() {
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// attach gates the scheduler's pops.
func (s *settler) attach(sched *scheduler.Scheduler) error {
	q, ok := sched.SchedulingQueue.(*queue.PriorityQueue)
	if !ok {
		return fmt.Errorf("the scheduler's queue is a %T, not the priority queue this harness reads", sched.SchedulingQueue)
	}
	s.queue = q
	next := sched.NextEntity
	sched.NextEntity = func(logger klog.Logger) (framework.QueuedEntityInfo, error) {
		s.waiting.Add(1)
		// The loop is back: the last cycle is over, which a harness waiting
		// for the scheduler to be idle wants to know now, not at its next
		// poll.
		s.notify()
		select {
		case <-s.tokens:
		case <-s.closed:
		}
		s.waiting.Add(-1)
		e, err := next(logger)
		select {
		case s.popped <- struct{}{}:
		case <-s.closed:
		}
		return e, err
	}
	return nil
}

// trackPods registers the scheduler's pod informer on f: the one
// kube-scheduler builds (no terminal pods, no managed fields), with every
// handler tracked.
func (s *settler) trackPods(f informers.SharedInformerFactory) {
	f.InformerFor(&v1.Pod{}, func(cs kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		inf := coreinformers.NewPodInformerWithOptions(cs, metav1.NamespaceAll, internalinterfaces.InformerOptions{
			ResyncPeriod: resync,
			Indexers:     cache.Indexers{},
			TweakListOptions: func(o *metav1.ListOptions) {
				o.FieldSelector = fmt.Sprintf("status.phase!=%v,status.phase!=%v", v1.PodSucceeded, v1.PodFailed)
			},
		})
		_ = inf.SetTransform(func(obj any) (any, error) {
			if a, err := meta.Accessor(obj); err == nil {
				a.SetManagedFields(nil)
			}
			return obj, nil
		})
		return &trackedInformer{SharedIndexInformer: inf, add: func(v *View) {
			s.mu.Lock()
			s.podViews = append(s.podViews, v)
			s.mu.Unlock()
		}, notify: s.notify}
	})
}

// trackPodGroups registers the scheduler's PodGroup informer on f, as
// kube-scheduler builds it, with every handler tracked.
func (s *settler) trackPodGroups(f informers.SharedInformerFactory) {
	f.InformerFor(&schedulingv1beta1.PodGroup{}, func(cs kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		inf := schedulinginformers.NewPodGroupInformer(cs, metav1.NamespaceAll, resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		return &trackedInformer{SharedIndexInformer: inf, add: func(v *View) {
			s.mu.Lock()
			s.groupViews = append(s.groupViews, v)
			s.mu.Unlock()
		}, notify: s.notify}
	})
}

// trackDynamic wraps the scheduler's dynamic informer factory (custom
// resources its plugins register events for).
func (s *settler) trackDynamic(f dynamicinformer.DynamicSharedInformerFactory) dynamicinformer.DynamicSharedInformerFactory {
	return &trackedDynamic{DynamicSharedInformerFactory: f, s: s, informers: map[schema.GroupVersionResource]*trackedGeneric{}}
}

type trackedDynamic struct {
	dynamicinformer.DynamicSharedInformerFactory
	s         *settler
	mu        sync.Mutex
	informers map[schema.GroupVersionResource]*trackedGeneric
}

func (d *trackedDynamic) ForResource(gvr schema.GroupVersionResource) informers.GenericInformer {
	d.mu.Lock()
	defer d.mu.Unlock()
	if g, ok := d.informers[gvr]; ok {
		return g
	}
	inner := d.DynamicSharedInformerFactory.ForResource(gvr)
	g := &trackedGeneric{GenericInformer: inner, inf: &trackedInformer{SharedIndexInformer: inner.Informer(), add: func(v *View) {
		d.s.mu.Lock()
		d.s.dynViews[gvr] = append(d.s.dynViews[gvr], v)
		d.s.mu.Unlock()
	}, notify: d.s.notify}}
	d.informers[gvr] = g
	return g
}

type trackedGeneric struct {
	informers.GenericInformer
	inf *trackedInformer
}

func (g *trackedGeneric) Informer() cache.SharedIndexInformer { return g.inf }

// trackedInformer gives every handler registered on it a View.
type trackedInformer struct {
	cache.SharedIndexInformer
	add    func(*View)
	notify func()
}

func (i *trackedInformer) track(h cache.ResourceEventHandler) cache.ResourceEventHandler {
	v := NewView(nil)
	i.add(v)
	return trackedHandler{h: h, v: v, notify: i.notify}
}

func (i *trackedInformer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return i.SharedIndexInformer.AddEventHandler(i.track(h))
}

func (i *trackedInformer) AddEventHandlerWithResyncPeriod(h cache.ResourceEventHandler, d time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return i.SharedIndexInformer.AddEventHandlerWithResyncPeriod(i.track(h), d)
}

func (i *trackedInformer) AddEventHandlerWithOptions(h cache.ResourceEventHandler, o cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	return i.SharedIndexInformer.AddEventHandlerWithOptions(i.track(h), o)
}

// trackedHandler records an event in its view after the handler it wraps
// has run, so a current view means the handler has done its work.
type trackedHandler struct {
	h      cache.ResourceEventHandler
	v      *View
	notify func()
}

func (t trackedHandler) OnAdd(obj any, initial bool) {
	t.h.OnAdd(obj, initial)
	t.v.Set(obj)
	t.notify()
}

func (t trackedHandler) OnUpdate(old, obj any) {
	t.h.OnUpdate(old, obj)
	t.v.Set(obj)
	t.notify()
}

func (t trackedHandler) OnDelete(obj any) {
	t.h.OnDelete(obj)
	t.v.Delete(obj)
	t.notify()
}

// View is the set of objects (namespace/name at a resourceVersion) one
// handler has processed, kept with an order-free digest so that two views
// compare in O(1).
type View struct {
	mu     sync.Mutex
	rv     map[string]string
	digest uint64
	// keep decides which objects count (nil: all); an object that stops
	// counting is removed, as a deletion would.
	keep func(any) bool
}

// NewView is an empty view; keep (nil: all) picks the objects it counts.
func NewView(keep func(any) bool) *View { return &View{rv: map[string]string{}, keep: keep} }

func entryHash(key, rv string) uint64 {
	return hashString(hashByte(hashString(fnvOffset, key), 0), rv)
}

// entryHashOf is entryHash of obj's key (namespace/name, or name) and
// version, without building the key.
func entryHashOf(a metav1.Object) uint64 {
	h := uint64(fnvOffset)
	if ns := a.GetNamespace(); ns != "" {
		h = hashByte(hashString(h, ns), '/')
	}
	return hashString(hashByte(hashString(h, a.GetName()), 0), a.GetResourceVersion())
}

// FNV-1a (hash/fnv's 64-bit), over strings without copying them.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func hashByte(h uint64, b byte) uint64 { return (h ^ uint64(b)) * fnvPrime }

func hashString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = hashByte(h, s[i])
	}
	return h
}

// Set records obj at its resourceVersion.
func (v *View) Set(obj any) {
	if v.keep != nil && !v.keep(obj) {
		v.Delete(obj)
		return
	}
	key, rv, ok := entryOf(obj)
	if !ok {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if old, ok := v.rv[key]; ok {
		v.digest ^= entryHash(key, old)
	}
	v.rv[key] = rv
	v.digest ^= entryHash(key, rv)
}

// entryOf is obj's key (namespace/name) and resourceVersion in a view.
func entryOf(obj any) (key, rv string, ok bool) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	a, aerr := meta.Accessor(obj)
	if err != nil || aerr != nil {
		return "", "", false
	}
	return key, a.GetResourceVersion(), true
}

// Delete forgets obj (or its tombstone).
func (v *View) Delete(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if old, ok := v.rv[key]; ok {
		v.digest ^= entryHash(key, old)
		delete(v.rv, key)
	}
}

// Digest is the view's content in one number, and its size.
func (v *View) Digest() (uint64, int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.digest, len(v.rv)
}

// Holds reports whether the view is exactly objs (those keep counts), each
// at its resourceVersion: whether the handler that keeps it has processed
// everything its informer's store holds. An informer updates its store
// before it hands the event to its handlers, so a handler's view can lag
// its own store, and a comparison against a lagging view passes on stale
// state.
func (v *View) Holds(objs []any) bool {
	var digest uint64
	n := 0
	for _, obj := range objs {
		if v.keep != nil && !v.keep(obj) {
			continue
		}
		a, err := meta.Accessor(obj)
		if err != nil {
			continue
		}
		digest ^= entryHashOf(a)
		n++
	}
	d, size := v.Digest()
	return d == digest && size == n
}

// Versions copies the view.
// Differs returns an object whose version in v differs from held's
// ("" when none does), without copying v.
func (v *View) Differs(held map[string]string) (key, want string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for k, r := range v.rv {
		if held[k] != r {
			return k, r
		}
	}
	return "", ""
}

func (v *View) Versions() map[string]string {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]string, len(v.rv))
	for k, r := range v.rv {
		out[k] = r
	}
	return out
}

// behind says how views differ from want ("" when all equal it): which
// handler, and with detail, which object (a scan of both views).
func behind(what string, views []*View, want *View, detail bool) string {
	d, n := want.Digest()
	for i, v := range views {
		if vd, vn := v.Digest(); vd != d || vn != n {
			if !detail {
				return fmt.Sprintf("%s handler %d is behind", what, i)
			}
			w, got := want.Versions(), v.Versions()
			for k, r := range w {
				if got[k] != r {
					return fmt.Sprintf("%s handler %d has %s at resourceVersion %q, the cluster %q", what, i, k, got[k], r)
				}
			}
			for k := range got {
				if _, ok := w[k]; !ok {
					return fmt.Sprintf("%s handler %d still has %s, which the cluster no longer has", what, i, k)
				}
			}
			return fmt.Sprintf("%s handler %d is behind", what, i)
		}
	}
	return ""
}

// Changed is closed at the next change of any tracked view.
func (s *Scheduler) Changed() <-chan struct{} {
	if s.settle == nil {
		return nil
	}
	s.settle.mu.Lock()
	defer s.settle.mu.Unlock()
	return s.settle.changed
}

// PodGroupsBehind says which of the scheduler's PodGroup handlers has
// not processed the PodGroups want holds ("" when all have).
func (s *Scheduler) PodGroupsBehind(want *View, detail bool) string {
	s.settle.mu.Lock()
	views := append([]*View(nil), s.settle.groupViews...)
	s.settle.mu.Unlock()
	return behind("PodGroup", views, want, detail)
}

// PodsBehind says which of the scheduler's pod handlers has not processed
// the pods want holds ("" when all have; with detail, which pod differs).
// want must count the pods the scheduler's informer lists: those not
// Succeeded or Failed.
func (s *Scheduler) PodsBehind(want *View, detail bool) string {
	s.settle.mu.Lock()
	views := append([]*View(nil), s.settle.podViews...)
	s.settle.mu.Unlock()
	return behind("pod", views, want, detail)
}

// ObjectsBehind is PodsBehind for a custom resource's handlers.
func (s *Scheduler) ObjectsBehind(gvr schema.GroupVersionResource, want *View, detail bool) string {
	s.settle.mu.Lock()
	views := append([]*View(nil), s.settle.dynViews[gvr]...)
	s.settle.mu.Unlock()
	return behind(gvr.Resource, views, want, detail)
}

// Idle says what the scheduler is still doing ("" when nothing): a pod in
// its active or backoff queue, or in flight (a scheduling or binding cycle),
// or its loop not yet back at the gate. Pods parked as unschedulable are
// idle: only an event moves them.
func (s *Scheduler) Idle() string {
	q := s.settle.queue
	if n := len(q.InFlightPods()); n > 0 {
		return fmt.Sprintf("%d pods in a scheduling or binding cycle", n)
	}
	if s.settle.waiting.Load() == 0 {
		return "the scheduling loop is between pods"
	}
	return ""
}

// Queued is how many pods wait in the active and backoff queues.
func (s *Scheduler) Queued() int {
	q := s.settle.queue
	return len(q.PodsInActiveQ()) + len(q.PodsInBackoffQ())
}

// QueuedPods names the pods in the active and backoff queues
// (namespace/name), in no order.
func (s *Scheduler) QueuedPods() []string {
	q := s.settle.queue
	var out []string
	for _, p := range append(q.PodsInActiveQ(), q.PodsInBackoffQ()...) {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}

// Pending is every pod the queue holds (active, backoff, unschedulable and
// pod-group pools), by UID.
func (s *Scheduler) Pending() map[types.UID]bool {
	pods, _ := s.settle.queue.PendingPods()
	out := make(map[types.UID]bool, len(pods))
	for _, p := range pods {
		out[p.UID] = true
	}
	return out
}

// Assumed says whether the scheduler holds pod as assumed: bound in its
// cache, its binding not yet seen through the informer.
func (s *Scheduler) Assumed(pod *v1.Pod) bool {
	ok, err := s.Sched.Cache.IsAssumedPod(pod)
	return err == nil && ok
}

// Step lets the scheduler pop one entity (a pod, or a pod group) and
// returns once it has: the entity is in flight. Call it only while the
// queue holds one (Queued), or it waits for the next.
func (s *Scheduler) Step(ctx context.Context) error {
	select {
	case s.settle.tokens <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-s.done:
		return fmt.Errorf("the scheduler stopped: %v", s.Err())
	}
	select {
	case <-s.settle.popped:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.done:
		return fmt.Errorf("the scheduler stopped: %v", s.Err())
	}
}

// PluginObjects is the resourceVersion of each node's NodeResourceTopology
// the nicaffinity plugin's store holds (nil without the plugin).
func (s *Scheduler) PluginObjects() map[string]string {
	pl := s.plugin.get()
	if pl == nil {
		return nil
	}
	return pl.ObjectVersions()
}

// NextRelax is when the plugin's next bounded wait ends (false without
// the plugin or a wait).
func (s *Scheduler) NextRelax() (time.Time, bool) {
	if pl := s.plugin.get(); pl != nil {
		return pl.NextRelax()
	}
	return time.Time{}, false
}
