package nicaffinity

import (
	"context"
	"fmt"
	"time"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	"github.com/k8stopologyawareschedwg/podfingerprint"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	podreq "github.com/nicaffinity/nicaffinity/pkg/request"
)

const nodeNameIndex = "nicaffinity.io/spec.nodeName"

// informerFeed is the cache's edge: it waits for the CRD, follows the
// NodeResourceTopology informer and the scheduler's pod and node
// informers, decodes what they deliver (objects, plans, pod sets) and
// hands the store plain values. The store knows none of this.
type informerFeed struct {
	c *Cache
	// pods are the scheduler's pods, indexed by node (nil for a feed
	// without informers: tests).
	pods cache.Indexer
	// schedulerName is the profile's: only its pods' plans are adopted.
	schedulerName string
	// reader reads a pod's job and rails policy, as the plugin does.
	reader podreq.Config
	// turnedDown are the pods Filter turned down (the plugin's waits):
	// requeued when an object brings room, forgotten once bound or gone.
	// nil until the plugin is made.
	turnedDown *waits
	// held is the plugin's parse of what pods hold: a deleted pod's goes.
	held *heldCache
}

// newInformerFeed makes a cache and feeds it from an NRT informer and the
// scheduler's pod and node informers.
func newInformerFeed(ctx context.Context, h fwk.Handle, cfg storeConfig, reader podreq.Config, client dynamic.Interface) (*informerFeed, error) {
	// Objects come in unstructured, so that their quantities are checked
	// as strings (nrt.Decode) before anything parses them.
	if client == nil {
		var err error
		if client, err = dynamic.NewForConfig(h.KubeConfig()); err != nil {
			return nil, err
		}
		disco, err := discovery.NewDiscoveryClientForConfig(h.KubeConfig())
		if err != nil {
			return nil, err
		}
		if err := waitForCRD(ctx, disco, crdWait, 2*time.Second); err != nil {
			return nil, err
		}
	}
	c := newCache(cfg)
	f := &informerFeed{c: c, schedulerName: h.ProfileName(), reader: reader}
	if err := f.watchPods(ctx, h); err != nil {
		return nil, err
	}
	if err := f.watchNodes(h, cfg.gpuResource); err != nil {
		return nil, err
	}

	factory := dynamicinformer.NewDynamicSharedInformerFactory(client, 0)
	informer := factory.ForResource(nrtGVR).Informer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { f.update(obj) },
		UpdateFunc: func(_, obj interface{}) { f.update(obj) },
		DeleteFunc: func(obj interface{}) {
			if o, ok := deletedObject(obj).(*unstructured.Unstructured); ok {
				c.remove(o.GetName())
			}
		},
	}); err != nil {
		return nil, err
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("NodeResourceTopology informer (%v) did not sync", typ)
		}
	}
	go func() {
		tick := time.NewTicker(sweepInterval(cfg.timeout))
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				c.expireDue()
			}
		}
	}()
	return f, nil
}

// watchPods feeds the cache from the scheduler's pod informer: plans to
// adopt, other schedulers' GPU pods, pods that end, objects to confirm.
func (f *informerFeed) watchPods(ctx context.Context, h fwk.Handle) error {
	podInformer := h.SharedInformerFactory().Core().V1().Pods().Informer()
	// The fingerprint check lists the pods of one node; an index keeps it
	// O(pods on the node). If the informer already runs, fall back to a scan.
	if err := podInformer.AddIndexers(cache.Indexers{nodeNameIndex: func(obj interface{}) ([]string, error) {
		if p, ok := obj.(*v1.Pod); ok && p.Spec.NodeName != "" {
			return []string{p.Spec.NodeName}, nil
		}
		return nil, nil
	}}); err != nil {
		klog.FromContext(ctx).Info("Pod informer already started; fingerprint checks will scan all pods", "err", err)
	}
	f.pods = podInformer.GetIndexer()
	if _, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		// Plans outlive the scheduler that made them: a restarted scheduler,
		// or another replica, holds what bound pods were planned to get
		// until the node's object counts them.
		AddFunc:    func(obj interface{}) { f.adoptPlan(obj); f.foreignBound(obj); f.recheck(obj) },
		UpdateFunc: f.podUpdated,
		DeleteFunc: f.podDeleted,
	}); err != nil {
		return err
	}
	return nil
}

// watchNodes feeds the cache from the scheduler's node informer.
func (f *informerFeed) watchNodes(h fwk.Handle, gpuResource string) error {
	c := f.c
	if _, err := h.SharedInformerFactory().Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		// Which nodes have GPUs decides whether Filter may be skipped
		// (skip.go). A node that joins or leaves makes a new snapshot
		// node list, which the skip checks anew anyway.
		UpdateFunc: func(old, obj any) {
			o, _ := old.(*v1.Node)
			n, _ := obj.(*v1.Node)
			if gpusChanged(o, n, gpuResource) {
				c.nodesChanged()
			}
		},
		DeleteFunc: func(obj interface{}) {
			if n, ok := deletedObject(obj).(*v1.Node); ok {
				c.remove(n.Name)
			}
		},
	}); err != nil {
		return err
	}
	return nil
}

// gpusChanged: a Node's allocatable GPUs differ between two versions (or
// either is not a Node).
func gpusChanged(old, new *v1.Node, gpu string) bool {
	if old == nil || new == nil {
		return true
	}
	r := v1.ResourceName(gpu)
	return !old.Status.Allocatable[r].Equal(new.Status.Allocatable[r])
}

// crdWait is how long the scheduler waits at start for the
// NodeResourceTopology CRD to be served (installed beside it) before it
// gives up with an error that says what is missing.
const crdWait = time.Minute

// waitForCRD polls discovery until the NodeResourceTopology resource is
// served, for at most wait.
func waitForCRD(ctx context.Context, disco discovery.DiscoveryInterface, wait, every time.Duration) error {
	gv := nrtGVR.GroupVersion().String()
	deadline := time.Now().Add(wait)
	for {
		list, err := disco.ServerResourcesForGroupVersion(gv)
		if err == nil {
			for _, r := range list.APIResources {
				if r.Name == nrtGVR.Resource {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the NodeResourceTopology CRD (%s.%s, version %s) is not served after %s: install manifests/crds (or the CRD of NFD or scheduler-plugins) first: %v",
				nrtGVR.Resource, nrtGVR.Group, nrtGVR.Version, wait, err)
		}
		klog.FromContext(ctx).Info("Waiting for the NodeResourceTopology CRD to be served", "groupVersion", gv, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}

// deletedObject unwraps an informer's tombstone.
func deletedObject(obj interface{}) interface{} {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}

// adoptPlan reserves the planned GPUs of a bound pod this cache holds no
// reservation for, unless the node's object already counts the pod.
//
// A plan is a claim on a node's GPUs, so it is adopted only from a pod of
// this scheduler and only up to the GPUs the pod requests: a tenant who
// writes the annotation on a pod of its own (admission refuses that too,
// docs/security.md) cannot hold a node's GPUs.
func (f *informerFeed) adoptPlan(obj interface{}) {
	p, ok := obj.(*v1.Pod)
	if !ok || p.Spec.NodeName == "" {
		return
	}
	if podutil.IsPodTerminal(p) {
		f.c.jobs.drop(p.UID) // its rails are free for the job to leave
		return
	}
	if p.Spec.SchedulerName != f.schedulerName {
		return
	}
	s, ok := p.Annotations[annotations.AllocationKey]
	if !ok || f.c.holds(p.UID) {
		return // most updates are of pods this scheduler reserved itself
	}
	plan, err := annotations.ParseAllocation(s)
	if err != nil || plan.Node != p.Spec.NodeName {
		return
	}
	requested := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})[v1.ResourceName(f.c.gpuResource)]
	if int64(len(plan.GPUs)) > requested.Value() {
		klog.InfoS("Ignoring a plan larger than the pod's request", "pod", klog.KObj(p), "planned", len(plan.GPUs), "requested", requested.Value())
		return
	}
	fingerprint := ""
	if f.c.compiledFingerprint(plan.Node) != "" {
		fingerprint, _ = f.podsOn(plan.Node)
	}
	f.c.adopt(plan.Node, p.UID, plan.GPUs, fingerprint)
	// A bound pod of a job holds its plan's rails for the job's next pods
	// (after a scheduler restart, or once its reservation is confirmed,
	// this is where the store learns them).
	if r, ok, err := podreq.Read(p, f.reader); err == nil && ok && r.FollowsRails() {
		f.c.jobs.add(r.Job.Key(), p.UID, f.c.countedRails(plan.Rails))
	}
}

// foreignBound notes a live pod that another scheduler bound to a node
// with GPUs, unless the node's object already counts it (the object's pod
// fingerprint is that of the node's pods as this scheduler sees them).
func (f *informerFeed) foreignBound(obj interface{}) {
	p, ok := obj.(*v1.Pod)
	if !ok || p.Spec.NodeName == "" || p.Spec.SchedulerName == f.schedulerName || p.DeletionTimestamp != nil || podutil.IsPodTerminal(p) {
		return
	}
	if q := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})[v1.ResourceName(f.c.gpuResource)]; q.Value() <= 0 {
		return
	}
	if fp := f.c.compiledFingerprint(p.Spec.NodeName); fp != "" {
		if now, _ := f.podsOn(p.Spec.NodeName); now == fp {
			return
		}
	}
	f.c.awaitForeign(p.Spec.NodeName, p.UID, p.Namespace+"/"+p.Name)
}

// podUpdated takes a pod update: a plan to adopt, a pod that ended, an
// object to confirm.
func (f *informerFeed) podUpdated(old, obj interface{}) {
	f.adoptPlan(obj)
	if o := asPod(old); o != nil && o.Spec.NodeName == "" {
		f.foreignBound(obj) // only at binding: status updates follow by the thousand
		if n := asPod(obj); n != nil && n.Spec.NodeName != "" && f.turnedDown != nil {
			f.turnedDown.forget(n.UID)
		}
	}
	if o, n := asPod(old), asPod(obj); o != nil && n != nil && !podutil.IsPodTerminal(o) && podutil.IsPodTerminal(n) {
		f.podEnded(n)
		return
	}
	f.recheck(obj)
}

// podDeleted takes a pod deletion: its reservation and job rails go, and
// its GPUs are released unless it ended before (and was released then).
func (f *informerFeed) podDeleted(obj interface{}) {
	p, ok := deletedObject(obj).(*v1.Pod)
	if !ok {
		return
	}
	f.c.forgetPod(p.UID)
	f.c.forgetForeign(p.Spec.NodeName, p.UID)
	if f.turnedDown != nil {
		f.turnedDown.forget(p.UID)
	}
	if f.held != nil {
		f.held.forget(p.UID)
	}
	if podutil.IsPodTerminal(p) {
		f.recheck(p)
		return
	}
	f.podEnded(p)
}

// asPod is obj as a pod, nil if it is none.
func asPod(obj interface{}) *v1.Pod {
	p, _ := obj.(*v1.Pod)
	return p
}

// podEnded bridges a pod's end (p was deleted, or updated to Succeeded or
// Failed from a phase that was neither): the scheduler's books free its
// GPUs at once, the node's object when its exporter next writes (within
// its debounce). With the node's pods listed once, it confirms what an
// object that counts them already shows, as recheck does; while the object
// does not count them (it may still count p), the view counts the GPUs
// the exporter observed p holding as free, until the node's next object.
// Without an observation (a pod that never ran, or ran unobserved) nothing
// is released: a plan is no proof of what the kubelet handed out.
func (f *informerFeed) podEnded(p *v1.Pod) {
	node := p.Spec.NodeName
	f.c.forgetForeign(node, p.UID)
	if node == "" || f.pods == nil {
		return
	}
	v := f.c.view(node)
	if v == nil || v.C == nil || v.C.Fingerprint == "" {
		return
	}
	observed := f.held.observedGPUs(v.C, p)
	if observed == 0 && !f.c.reserving(node) {
		return
	}
	fp, counted := f.podsOn(node)
	if fp == v.C.Fingerprint {
		f.c.confirm(node, fp, counted)
		return
	}
	if observed != 0 {
		f.c.release(node, v.C.ResourceVersion, p.UID, observed)
	}
}

// recheck confirms the reservations on a pod's node once the scheduler's
// pods match the node's object: the object and the pod events come on
// different informers, in either order, and an object that arrived first
// would otherwise leave its reservations held (counted twice) until the
// node's next write or the reservation timeout.
func (f *informerFeed) recheck(obj interface{}) {
	p, ok := obj.(*v1.Pod)
	if !ok || p.Spec.NodeName == "" || f.pods == nil || !f.c.reserving(p.Spec.NodeName) {
		return
	}
	if fp := f.c.compiledFingerprint(p.Spec.NodeName); fp != "" {
		fp, counted := f.podsOn(p.Spec.NodeName)
		if f.c.confirm(p.Spec.NodeName, fp, counted) && f.turnedDown != nil {
			// The object now counts what was held apart: the node's view
			// may offer more than when the object came. Requeue as the
			// object's arrival does (observe), or whether a turned-down pod
			// is retried would follow which of the pod's event and the
			// object's reached the plugin first.
			if v, _ := usable(f.c.view(p.Spec.NodeName)); v != nil {
				f.turnedDown.roomFor(v.Free.Count())
			}
		}
	}
}

// nrtGVR is the NodeResourceTopology resource the exporter publishes.
var nrtGVR = v1alpha2.SchemeGroupVersion.WithResource("noderesourcetopologies")

// update takes an object event, from the plugin's informer or from a
// queueing hint: unstructured objects are decoded with their quantities
// checked first (nrt.Decode); a version already held is skipped.
func (f *informerFeed) update(obj interface{}) {
	c := f.c
	if o, ok := obj.(*v1alpha2.NodeResourceTopology); ok {
		f.observe(o)
		return
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || c.has(u.GetName(), u.GetResourceVersion()) {
		return
	}
	o, err := nrt.Decode(u)
	if err != nil {
		klog.InfoS("NodeResourceTopology cannot be read; the node counts as topology unknown", "node", u.GetName(), "err", err)
		c.set(u.GetName(), u.GetResourceVersion(), nil, err, nil)
		c.markHandled(u.GetName(), u.GetResourceVersion())
		return
	}
	f.observe(o)
}

// observe compiles an object unless its version is already in.
func (f *informerFeed) observe(o *v1alpha2.NodeResourceTopology) {
	c := f.c
	if c.has(o.Name, o.ResourceVersion) {
		return
	}
	compiled, err := nrt.Compile(o, c.gpuResource)
	if err != nil {
		klog.InfoS("NodeResourceTopology cannot be read; the node counts as topology unknown", "node", o.Name, "err", err)
	}
	var counted map[types.UID]bool
	if compiled != nil && compiled.Fingerprint != "" && f.pods != nil {
		if fp, pods := f.podsOn(o.Name); fp == compiled.Fingerprint {
			counted = pods
		}
	}
	c.set(o.Name, o.ResourceVersion, compiled, err, counted)
	if f.turnedDown != nil {
		// Requeue what the scheduler's queueing hint may have skipped
		// because this version was not in the store yet: every pod Filter
		// turned down that asks no more GPUs than the node now has free,
		// as the hint answers once the store holds the version. Not only
		// when room grew against the store's last view: that view may
		// already count a deleted pod's GPUs free (podEnded) that the pod
		// was turned down without.
		if v, _ := usable(c.view(o.Name)); v != nil {
			f.turnedDown.roomFor(v.Free.Count())
		}
	}
	c.markHandled(o.Name, o.ResourceVersion)
}

// podsOn is the set of pods the scheduler sees on a node: its pod-set
// fingerprint, as the exporter computes it from the kubelet's list, and
// the pods' UIDs. An object with that fingerprint counts those pods, and
// only those: a pod this scheduler reserved and has not yet seen bound is
// not among them.
func (f *informerFeed) podsOn(node string) (string, map[types.UID]bool) {
	if f.pods == nil {
		return "", nil
	}
	objs, err := f.pods.ByIndex(nodeNameIndex, node)
	if err != nil {
		objs = nil
		for _, o := range f.pods.List() {
			if p, ok := o.(*v1.Pod); ok && p.Spec.NodeName == node {
				objs = append(objs, p)
			}
		}
	}
	fp := podfingerprint.NewFingerprint(len(objs))
	uids := make(map[types.UID]bool, len(objs))
	for _, o := range objs {
		p, ok := o.(*v1.Pod)
		if !ok || podutil.IsPodTerminal(p) {
			continue
		}
		_ = fp.Add(p.Namespace, p.Name)
		uids[p.UID] = true
	}
	return fp.Sign(), uids
}
