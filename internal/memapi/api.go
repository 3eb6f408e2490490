package memapi

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	nrtv1alpha2 "github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	nrtclient "github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/generated/clientset/versioned"
	nrtfake "github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/generated/clientset/versioned/fake"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	k8stesting "k8s.io/client-go/testing"
	corev1defaults "k8s.io/kubernetes/pkg/apis/core/v1"
)

// API is the in-memory API: the store and the clients that reach it.
type API struct {
	store  *Store
	scheme *runtime.Scheme

	mu    sync.Mutex
	fakes []*k8stesting.Fake
	stop  chan struct{}
	once  sync.Once

	dropBindingAnnotations bool
}

// Option changes an API.
type Option func(*API)

// DropBindingAnnotations is a fault for tests that must show a replay
// notices the API: bindings lose their annotations (the plugin's plan).
func DropBindingAnnotations() Option { return func(a *API) { a.dropBindingAnnotations = true } }

// New makes an empty in-memory API serving the built-in types and
// NodeResourceTopology. Close releases it.
func New(opts ...Option) (*API, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, nrtv1alpha2.AddToScheme, corev1defaults.RegisterDefaults} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	a := &API{store: NewStore(scheme), scheme: scheme, stop: make(chan struct{})}
	for _, o := range opts {
		o(a)
	}
	// The fake clientsets record every call; nothing here reads the
	// record, so it is dropped now and then to bound memory.
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-a.stop:
				return
			case <-tick.C:
				a.mu.Lock()
				fakes := a.fakes
				a.mu.Unlock()
				for _, f := range fakes {
					f.ClearActions()
				}
			}
		}
	}()
	return a, nil
}

// Close ends every watch and the clients' upkeep.
func (a *API) Close() {
	a.once.Do(func() {
		close(a.stop)
		a.store.Close()
	})
}

func (a *API) wire(f *k8stesting.Fake, unstructuredOut bool) {
	f.PrependReactor("*", "*", func(action k8stesting.Action) (bool, runtime.Object, error) {
		obj, err := a.react(action, unstructuredOut)
		return true, obj, err
	})
	f.PrependWatchReactor("*", func(action k8stesting.Action) (bool, watch.Interface, error) {
		w, err := a.watch(action, unstructuredOut)
		if err != nil {
			return true, nil, err
		}
		return true, w, nil
	})
	a.mu.Lock()
	a.fakes = append(a.fakes, f)
	a.mu.Unlock()
}

// Kube is a new client-go clientset on the store.
func (a *API) Kube() kubernetes.Interface {
	cs := kubefake.NewClientset()
	a.wire(&cs.Fake, false)
	return cs
}

// NRT is a new NodeResourceTopology clientset on the store.
func (a *API) NRT() nrtclient.Interface {
	cs := nrtfake.NewSimpleClientset()
	a.wire(&cs.Fake, false)
	return cs
}

// nrtGVR is where NodeResourceTopology objects are served.
var nrtGVR = nrtv1alpha2.SchemeGroupVersion.WithResource("noderesourcetopologies")

// Dynamic is a new dynamic client on the store (objects come out
// unstructured, as from kube-apiserver).
func (a *API) Dynamic() dynamic.Interface {
	c := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(a.scheme, map[schema.GroupVersionResource]string{nrtGVR: "NodeResourceTopologyList"})
	a.wire(&c.Fake, true)
	return c
}

// react serves one call.
func (a *API) react(action k8stesting.Action, unstructuredOut bool) (runtime.Object, error) {
	gvr, ns := action.GetResource(), action.GetNamespace()
	var obj runtime.Object
	var err error
	switch act := action.(type) {
	case k8stesting.GetActionImpl:
		obj, err = a.store.Get(gvr, ns, act.Name)
	case k8stesting.ListActionImpl:
		return a.list(gvr, act, unstructuredOut)
	case k8stesting.CreateActionImpl:
		if isEvent(gvr) {
			return act.Object, nil
		}
		obj, err = a.create(gvr, ns, act)
	case k8stesting.UpdateActionImpl:
		if isEvent(gvr) {
			return act.Object, nil
		}
		obj, err = a.Update(gvr, act.Subresource, act.Object)
	case k8stesting.PatchActionImpl:
		if isEvent(gvr) {
			return nil, apierrors.NewNotFound(gvr.GroupResource(), act.Name)
		}
		obj, err = a.patch(gvr, ns, act)
	case k8stesting.DeleteActionImpl:
		if isEvent(gvr) {
			return nil, nil
		}
		return nil, a.Delete(gvr, ns, act.Name, act.DeleteOptions)
	default:
		return nil, apierrors.NewMethodNotSupported(gvr.GroupResource(), action.GetVerb())
	}
	if err != nil {
		return nil, err
	}
	return a.out(gvr, obj, unstructuredOut)
}

// out is obj as a client receives it: with its kind for the dynamic
// client (which reads it unstructured).
func (a *API) out(gvr schema.GroupVersionResource, obj runtime.Object, unstructuredOut bool) (runtime.Object, error) {
	if !unstructuredOut || obj == nil {
		return obj, nil
	}
	return a.toUnstructured(obj)
}

func (a *API) toUnstructured(obj runtime.Object) (*unstructured.Unstructured, error) {
	gvks, _, err := a.scheme.ObjectKinds(obj)
	if err != nil {
		return nil, err
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	out := &unstructured.Unstructured{Object: u}
	out.SetGroupVersionKind(gvks[0])
	return out, nil
}

func (a *API) list(gvr schema.GroupVersionResource, act k8stesting.ListActionImpl, unstructuredOut bool) (runtime.Object, error) {
	match, err := selector(gvr, act.ListRestrictions.Labels, act.ListRestrictions.Fields)
	if err != nil {
		return nil, err
	}
	items, rv := a.store.list(gvr, act.Namespace, match)
	rvs := fmt.Sprint(rv)
	if unstructuredOut {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion(gvr.GroupVersion().String())
		list.SetKind(act.Kind.Kind + "List")
		list.SetResourceVersion(rvs)
		for _, obj := range items {
			u, err := a.toUnstructured(obj)
			if err != nil {
				return nil, err
			}
			list.Items = append(list.Items, *u)
		}
		return list, nil
	}
	listGVK := act.Kind
	listGVK.Kind += "List"
	list, err := a.scheme.New(listGVK)
	if err != nil {
		return nil, err
	}
	if err := meta.SetList(list, items); err != nil {
		return nil, err
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return nil, err
	}
	lm.SetResourceVersion(rvs)
	return list, nil
}

func (a *API) watch(action k8stesting.Action, unstructuredOut bool) (watch.Interface, error) {
	act, ok := action.(k8stesting.WatchActionImpl)
	if !ok {
		return nil, fmt.Errorf("unexpected watch action %T", action)
	}
	gvr := act.GetResource()
	match, err := selector(gvr, act.WatchRestrictions.Labels, act.WatchRestrictions.Fields)
	if err != nil {
		return nil, err
	}
	from, err := parseRV(act.WatchRestrictions.ResourceVersion)
	if err != nil {
		return nil, err
	}
	var initial runtime.Object
	if act.ListOptions.SendInitialEvents != nil && *act.ListOptions.SendInitialEvents {
		gvk, err := a.kindFor(gvr)
		if err != nil {
			return nil, err
		}
		if unstructuredOut {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(gvk)
			initial = u
		} else if initial, err = a.scheme.New(gvk); err != nil {
			return nil, err
		}
	}
	convert := func(obj runtime.Object) runtime.Object { return obj }
	if unstructuredOut {
		convert = func(obj runtime.Object) runtime.Object {
			if u, err := a.toUnstructured(obj); err == nil {
				return u
			}
			return obj
		}
	}
	return a.store.watch(gvr, act.Namespace, from, initial, match, onlyNode(gvr, act.WatchRestrictions), convert)
}

// onlyNode is the node whose pods a watch selects and nothing else
// ("" when it selects otherwise).
func onlyNode(gvr schema.GroupVersionResource, r k8stesting.WatchRestrictions) string {
	if gvr != podsGVR || (r.Labels != nil && !r.Labels.Empty()) || r.Fields == nil {
		return ""
	}
	reqs := r.Fields.Requirements()
	if len(reqs) != 1 || reqs[0].Field != "spec.nodeName" || reqs[0].Value == "" ||
		(reqs[0].Operator != selection.Equals && reqs[0].Operator != selection.DoubleEquals) {
		return ""
	}
	return reqs[0].Value
}

// kindFor is the kind served at gvr.
func (a *API) kindFor(gvr schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	for gvk := range a.scheme.AllKnownTypes() {
		if gvk.GroupVersion() != gvr.GroupVersion() || strings.HasSuffix(gvk.Kind, "List") {
			continue
		}
		if plural, _ := meta.UnsafeGuessKindToResource(gvk); plural == gvr {
			return gvk, nil
		}
	}
	return schema.GroupVersionKind{}, apierrors.NewNotFound(gvr.GroupResource(), "")
}

func (a *API) create(gvr schema.GroupVersionResource, ns string, act k8stesting.CreateActionImpl) (runtime.Object, error) {
	switch {
	case act.Subresource == "binding" && gvr == podsGVR:
		b, ok := act.Object.(*corev1.Binding)
		if !ok {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("pods/binding takes a Binding, not %T", act.Object))
		}
		if a.dropBindingAnnotations {
			b = b.DeepCopy()
			b.Annotations = nil
		}
		// client-go's fake sends a binding to the binding's namespace
		// (the scheduler's binder sets it to the pod's).
		name := act.Name
		if name == "" {
			name = b.Name
		}
		if ns == "" {
			ns = b.Namespace
		}
		a.store.mu.Lock()
		defer a.store.mu.Unlock()
		return a.store.update(key{gvr, ns, name}, func(cur runtime.Object) (runtime.Object, error) {
			pod, err := bind(cur.(*corev1.Pod), b, a.store.now())
			if err != nil {
				return nil, err
			}
			pod.ResourceVersion = ""
			return pod, nil
		})
	case act.Subresource != "":
		return nil, apierrors.NewMethodNotSupported(gvr.GroupResource(), "create "+act.Subresource)
	}
	return a.Create(gvr, ns, act.Object)
}

// Create stores a new object in ns.
func (a *API) Create(gvr schema.GroupVersionResource, ns string, obj runtime.Object) (runtime.Object, error) {
	obj = obj.DeepCopyObject()
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	if m.GetNamespace() == "" {
		m.SetNamespace(ns)
	}
	if m.GetNamespace() != ns {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the namespace of the object (%s) does not match the namespace of the request (%s)", m.GetNamespace(), ns))
	}
	a.prepareCreate(gvr, obj)
	a.store.mu.Lock()
	defer a.store.mu.Unlock()
	stored, err := a.store.create(gvr, obj)
	if err != nil {
		return nil, err
	}
	return stored.DeepCopyObject(), nil
}

// Update replaces an object (subresource "" or "status").
func (a *API) Update(gvr schema.GroupVersionResource, subresource string, obj runtime.Object) (runtime.Object, error) {
	k, err := objectKey(gvr, obj)
	if err != nil {
		return nil, err
	}
	a.store.mu.Lock()
	defer a.store.mu.Unlock()
	return a.store.update(k, func(cur runtime.Object) (runtime.Object, error) {
		return mergeUpdate(gvr, subresource, cur, obj.DeepCopyObject())
	})
}

func (a *API) patch(gvr schema.GroupVersionResource, ns string, act k8stesting.PatchActionImpl) (runtime.Object, error) {
	if act.PatchType == types.ApplyPatchType {
		return a.apply(gvr, ns, act.Name, act.Patch)
	}
	a.store.mu.Lock()
	defer a.store.mu.Unlock()
	return a.store.update(key{gvr, ns, act.Name}, func(cur runtime.Object) (runtime.Object, error) {
		old, err := json.Marshal(cur)
		if err != nil {
			return nil, err
		}
		var patched []byte
		switch act.PatchType {
		case types.JSONPatchType:
			p, err := jsonpatch.DecodePatch(act.Patch)
			if err != nil {
				return nil, apierrors.NewBadRequest(err.Error())
			}
			patched, err = p.Apply(old)
			if err != nil {
				return nil, apierrors.NewBadRequest(err.Error())
			}
		case types.MergePatchType:
			patched, err = jsonpatch.MergePatch(old, act.Patch)
			if err != nil {
				return nil, apierrors.NewBadRequest(err.Error())
			}
		case types.StrategicMergePatchType:
			patched, err = strategicpatch.StrategicMergePatch(old, act.Patch, cur)
			if err != nil {
				return nil, apierrors.NewBadRequest(err.Error())
			}
		default:
			return nil, apierrors.NewBadRequest(fmt.Sprintf("patch type %s is not supported", act.PatchType))
		}
		next := cur.DeepCopyObject()
		if err := resetAndDecode(patched, next); err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		return mergeUpdate(gvr, act.Subresource, cur, next)
	})
}

// resetAndDecode decodes data into a zeroed obj.
func resetAndDecode(data []byte, obj runtime.Object) error {
	u := map[string]any{}
	if err := json.Unmarshal(data, &u); err != nil {
		return err
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u, obj)
}

// apply is server-side apply without field ownership: the applied object
// replaces what is stored (metadata the server owns stays), or is created.
func (a *API) apply(gvr schema.GroupVersionResource, ns, name string, body []byte) (runtime.Object, error) {
	u := map[string]any{}
	if err := json.Unmarshal(body, &u); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("apply %s %s: %v", gvr.Resource, name, err))
	}
	gvk := schema.FromAPIVersionAndKind(fmt.Sprint(u["apiVersion"]), fmt.Sprint(u["kind"]))
	obj, err := a.scheme.New(gvk)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("apply %s %s: %v", gvr.Resource, name, err))
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u, obj); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("apply %s %s: %v", gvr.Resource, name, err))
	}
	m, _ := meta.Accessor(obj)
	if m.GetName() == "" {
		m.SetName(name)
	}
	if m.GetName() != name {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("apply %s %s: the object is named %s", gvr.Resource, name, m.GetName()))
	}
	obj.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	a.store.mu.Lock()
	_, err = a.store.get(key{gvr, ns, name})
	a.store.mu.Unlock()
	if apierrors.IsNotFound(err) {
		return a.Create(gvr, ns, obj)
	}
	m.SetResourceVersion("")
	a.store.mu.Lock()
	defer a.store.mu.Unlock()
	return a.store.update(key{gvr, ns, name}, func(cur runtime.Object) (runtime.Object, error) {
		return mergeUpdate(gvr, "", cur, obj.DeepCopyObject())
	})
}

// Delete deletes an object as kube-apiserver does (deletion's rules).
func (a *API) Delete(gvr schema.GroupVersionResource, ns, name string, opts metav1.DeleteOptions) error {
	a.store.mu.Lock()
	defer a.store.mu.Unlock()
	k := key{gvr, ns, name}
	cur, err := a.store.get(k)
	if err != nil {
		return err
	}
	next, gone, err := deletion(cur, opts, a.store.now())
	if err != nil {
		return err
	}
	if next != nil {
		nm, _ := meta.Accessor(next)
		nm.SetResourceVersion("")
		if _, err := a.store.update(k, func(runtime.Object) (runtime.Object, error) { return next, nil }); err != nil {
			return err
		}
	}
	if gone {
		if _, err := a.store.get(k); err == nil {
			return a.store.remove(k)
		}
	}
	return nil
}

// ApplyNRT is the exporter's server-side apply of a NodeResourceTopology.
func (a *API) ApplyNRT(_ context.Context, name string, body []byte) error {
	_, err := a.apply(nrtGVR, "", name, body)
	return err
}
