// Package memapi is an in-memory Kubernetes API for replays: one object
// store that client-go's fake clientsets (core, NodeResourceTopology,
// dynamic) and the exporter's client read and write, so that the real
// kube-scheduler, the plugin, the exporters and the simulated kubelets of a
// replay talk to each other without kube-apiserver, etcd, HTTP or TLS.
//
// It keeps what a replay's decisions depend on, as kube-apiserver does it:
//
//   - one resourceVersion counter over every object (etcd's revision),
//     written into each object, with optimistic concurrency on updates;
//   - watches that resume from a list's resourceVersion (410 Gone when the
//     history no longer reaches back), honour label and field selectors,
//     and turn an object entering or leaving a selector into ADDED or
//     DELETED, as the watch cache does;
//   - writes that change nothing are not writes: no new resourceVersion,
//     no event (GuaranteedUpdate's rule);
//   - status subresources, pod bindings with the binding's annotations,
//     graceful pod deletion (the kubelet finishes it) and pods' defaults
//     (the v1 defaulting functions, status Pending, priority 0).
//
// What it leaves out is stated in docs/simulate.md: no admission, no
// authorization, no validation beyond what the replay needs, no field
// ownership (a server-side apply replaces the applier's object), and
// Events are accepted and dropped.
package memapi

import (
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/watch"
)

// historyKeep is how many writes a watch can resume across: a reflector
// whose resourceVersion is older relists (410 Gone), as it does when
// etcd has compacted past it.
const historyKeep = 1 << 16

type key struct {
	gvr       schema.GroupVersionResource
	namespace string
	name      string
}

// change is one write, as watchers see it: obj after (nil when deleted),
// old before (nil when created).
type change struct {
	rv       int64
	gvr      schema.GroupVersionResource
	obj, old runtime.Object
}

// Store holds every object. Stored objects are never changed in place:
// a write stores a new object, so readers and watchers share them and
// copy only what they hand out.
type Store struct {
	scheme *runtime.Scheme
	now    func() time.Time

	mu       sync.Mutex
	rv       int64
	objects  map[schema.GroupVersionResource]map[key]runtime.Object
	history  []change
	watchers map[schema.GroupVersionResource]map[*watcher]struct{}
	// onNode are the pod watchers that select one node's pods and
	// nothing else (kubelets, exporters), by node: a pod's write goes to
	// its node's watchers only, not past every node's selector.
	onNode map[string]map[*watcher]struct{}
	closed bool
}

// NewStore makes an empty store for the types of scheme.
func NewStore(scheme *runtime.Scheme) *Store {
	return &Store{scheme: scheme, now: time.Now, rv: 1,
		objects:  map[schema.GroupVersionResource]map[key]runtime.Object{},
		watchers: map[schema.GroupVersionResource]map[*watcher]struct{}{}, onNode: map[string]map[*watcher]struct{}{}}
}

// Close ends every watch; later watches fail.
func (s *Store) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, ws := range s.watchers {
		for w := range ws {
			w.stop()
		}
	}
	for _, ws := range s.onNode {
		for w := range ws {
			w.stop()
		}
	}
	s.watchers = map[schema.GroupVersionResource]map[*watcher]struct{}{}
	s.onNode = map[string]map[*watcher]struct{}{}
}

// get returns the stored object (shared: not to be changed) or NotFound.
func (s *Store) get(k key) (runtime.Object, error) {
	obj, ok := s.objects[k.gvr][k]
	if !ok {
		return nil, apierrors.NewNotFound(k.gvr.GroupResource(), k.name)
	}
	return obj, nil
}

// Get returns a copy of one object.
func (s *Store) Get(gvr schema.GroupVersionResource, ns, name string) (runtime.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	obj, err := s.get(key{gvr, ns, name})
	if err != nil {
		return nil, err
	}
	return obj.DeepCopyObject(), nil
}

// write stores obj (nil: deletes k) at the next resourceVersion and tells
// the watchers; s.mu is held. obj must be the store's own copy.
func (s *Store) write(k key, obj runtime.Object) runtime.Object {
	old := s.objects[k.gvr][k]
	s.rv++
	if obj != nil {
		m, _ := meta.Accessor(obj)
		m.SetResourceVersion(strconv.FormatInt(s.rv, 10))
		if s.objects[k.gvr] == nil {
			s.objects[k.gvr] = map[key]runtime.Object{}
		}
		s.objects[k.gvr][k] = obj
	} else {
		delete(s.objects[k.gvr], k)
		// A deletion's event carries the object at the deletion's version.
		old = old.DeepCopyObject()
		m, _ := meta.Accessor(old)
		m.SetResourceVersion(strconv.FormatInt(s.rv, 10))
	}
	c := change{rv: s.rv, gvr: k.gvr, obj: obj, old: old}
	s.history = append(s.history, c)
	if len(s.history) > 2*historyKeep {
		s.history = append([]change(nil), s.history[len(s.history)-historyKeep:]...)
	}
	for w := range s.watchers[k.gvr] {
		w.send(c)
	}
	if k.gvr == podsGVR {
		a, b := nodeOf(c.old), nodeOf(c.obj)
		for w := range s.onNode[a] {
			w.send(c)
		}
		if b != a {
			for w := range s.onNode[b] {
				w.send(c)
			}
		}
	}
	return obj
}

// create stores a new object; s.mu is held.
func (s *Store) create(gvr schema.GroupVersionResource, obj runtime.Object) (runtime.Object, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	if m.GetName() == "" && m.GetGenerateName() != "" {
		m.SetName(m.GetGenerateName() + string(uuid.NewUUID())[:5])
	}
	if m.GetName() == "" {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("%s: name or generateName is required", gvr.Resource))
	}
	if m.GetResourceVersion() != "" {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("%s %s: resourceVersion should not be set on objects to be created", gvr.Resource, m.GetName()))
	}
	k := key{gvr, m.GetNamespace(), m.GetName()}
	if _, ok := s.objects[gvr][k]; ok {
		return nil, apierrors.NewAlreadyExists(gvr.GroupResource(), m.GetName())
	}
	m.SetUID(uuid.NewUUID())
	m.SetCreationTimestamp(metav1.NewTime(s.now()))
	m.SetGeneration(1)
	m.SetDeletionTimestamp(nil)
	m.SetDeletionGracePeriodSeconds(nil)
	m.SetManagedFields(nil)
	return s.write(k, obj), nil
}

// update replaces an object with next, computed from a copy of the
// stored one; s.mu is held. A next equal to the stored object is no
// write. A next that sets a resourceVersion must match the stored one.
func (s *Store) update(k key, next func(cur runtime.Object) (runtime.Object, error)) (runtime.Object, error) {
	cur, err := s.get(k)
	if err != nil {
		return nil, err
	}
	obj, err := next(cur.DeepCopyObject())
	if err != nil {
		return nil, err
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	cm, _ := meta.Accessor(cur)
	if rv := m.GetResourceVersion(); rv != "" && rv != cm.GetResourceVersion() {
		return nil, apierrors.NewConflict(k.gvr.GroupResource(), k.name,
			fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
	}
	if m.GetName() != k.name || (m.GetNamespace() != "" && m.GetNamespace() != k.namespace) {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("%s %s: the name or namespace of the object does not match the request", k.gvr.Resource, k.name))
	}
	// What the server owns stays the server's.
	m.SetNamespace(k.namespace)
	m.SetUID(cm.GetUID())
	m.SetCreationTimestamp(cm.GetCreationTimestamp())
	m.SetGeneration(cm.GetGeneration())
	m.SetResourceVersion(cm.GetResourceVersion())
	m.SetManagedFields(nil)
	if specChanged(cur, obj) {
		m.SetGeneration(cm.GetGeneration() + 1)
	}
	if apiequality.Semantic.DeepEqual(cur, obj) {
		return cur.DeepCopyObject(), nil
	}
	if m.GetDeletionTimestamp() != nil && len(m.GetFinalizers()) == 0 && cm.GetDeletionTimestamp() != nil &&
		(cm.GetDeletionGracePeriodSeconds() == nil || *cm.GetDeletionGracePeriodSeconds() == 0) {
		// The last finalizer of an object being deleted went: it goes.
		s.write(k, nil)
		return obj, nil
	}
	return s.write(k, obj).DeepCopyObject(), nil
}

// specChanged reports whether obj's spec differs from cur's (the
// generation's rule; objects without a spec never bump it here).
func specChanged(cur, obj runtime.Object) bool {
	a, b := reflect.ValueOf(cur), reflect.ValueOf(obj)
	if a.Kind() != reflect.Pointer || b.Kind() != reflect.Pointer || a.Elem().Kind() != reflect.Struct {
		return false
	}
	fa, fb := a.Elem().FieldByName("Spec"), b.Elem().FieldByName("Spec")
	if !fa.IsValid() || !fb.IsValid() {
		return false
	}
	return !apiequality.Semantic.DeepEqual(fa.Interface(), fb.Interface())
}

// remove deletes an object now; s.mu is held.
func (s *Store) remove(k key) error {
	if _, err := s.get(k); err != nil {
		return err
	}
	s.write(k, nil)
	return nil
}

// list returns copies of the objects of gvr in ns ("" for all) that
// match, and the store's resourceVersion.
func (s *Store) list(gvr schema.GroupVersionResource, ns string, match func(runtime.Object) bool) ([]runtime.Object, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []runtime.Object
	for k, obj := range s.objects[gvr] {
		if ns != "" && k.namespace != ns {
			continue
		}
		if match(obj) {
			out = append(out, obj.DeepCopyObject())
		}
	}
	return out, s.rv
}

// watch starts a watcher of gvr from resourceVersion from (0: send every
// current object as ADDED first; with initial, an empty object of the
// type, then a bookmark made of it after them, as a watch-list ends). It fails with 410 Gone when the
// history no longer reaches back to from.
//
// node, when set, says the watch selects exactly the pods of that node.
func (s *Store) watch(gvr schema.GroupVersionResource, ns string, from int64, initial runtime.Object, match func(runtime.Object) bool, node string, convert func(runtime.Object) runtime.Object) (*watcher, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, apierrors.NewServiceUnavailable("the in-memory API has stopped")
	}
	w := newWatcher(ns, match, convert)
	switch {
	case initial != nil || from == 0:
		for k, obj := range s.objects[gvr] {
			if (ns == "" || k.namespace == ns) && match(obj) {
				w.push(watch.Event{Type: watch.Added, Object: convert(obj.DeepCopyObject())})
			}
		}
		if initial != nil {
			w.bookmark(initial, s.rv)
		}
	case from < s.rv:
		if len(s.history) == 0 || s.history[0].rv > from+1 {
			return nil, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", from, s.rv))
		}
		for _, c := range s.history {
			if c.rv > from && c.gvr == gvr {
				w.send(c)
			}
		}
	case from > s.rv:
		return nil, apierrors.NewTimeoutError(fmt.Sprintf("Too large resource version: %d, current: %d", from, s.rv), 1)
	}
	set := s.watchers[gvr]
	if gvr == podsGVR && node != "" {
		if s.onNode[node] == nil {
			s.onNode[node] = map[*watcher]struct{}{}
		}
		set = s.onNode[node]
	} else if set == nil {
		set = map[*watcher]struct{}{}
		s.watchers[gvr] = set
	}
	set[w] = struct{}{}
	w.forget = func() {
		s.mu.Lock()
		delete(set, w)
		s.mu.Unlock()
	}
	return w, nil
}

// nodeOf is a pod's node ("" for none, or not a pod).
func nodeOf(obj runtime.Object) string {
	if pod, ok := obj.(*corev1.Pod); ok {
		return pod.Spec.NodeName
	}
	return ""
}

// objectKey is obj's key under gvr.
func objectKey(gvr schema.GroupVersionResource, obj runtime.Object) (key, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return key{}, err
	}
	return key{gvr, m.GetNamespace(), m.GetName()}, nil
}
