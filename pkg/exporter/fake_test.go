package exporter

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// fakeKube is an in-memory Kube: pods with list, watch and annotation
// merge patches, claims, slices and events. It is written here rather than
// taken from client-go's fake clientset because this package's tests also
// run under -race, and that clientset would bring every API group's typed
// fakes into the race build (Makefile, RACE_PKGS).
type fakeKube struct {
	mu       sync.Mutex
	rv       int
	pods     map[string]*corev1.Pod // namespace/name
	claims   map[string]*resourcev1.ResourceClaim
	slices   []resourcev1.ResourceSlice
	events   []corev1.Event
	watchers []*watch.RaceFreeFakeWatcher
}

func newFakeKube(pods ...*corev1.Pod) *fakeKube {
	f := &fakeKube{pods: map[string]*corev1.Pod{}, claims: map[string]*resourcev1.ResourceClaim{}}
	for _, p := range pods {
		f.rv++
		p = p.DeepCopy()
		p.ResourceVersion = strconv.Itoa(f.rv)
		f.pods[p.Namespace+"/"+p.Name] = p
	}
	return f
}

func (f *fakeKube) withClaims(claims ...*resourcev1.ResourceClaim) *fakeKube {
	for _, c := range claims {
		f.claims[c.Namespace+"/"+c.Name] = c.DeepCopy()
	}
	return f
}

func (f *fakeKube) withSlices(slices ...resourcev1.ResourceSlice) *fakeKube {
	f.slices = append(f.slices, slices...)
	return f
}

// IsWatchListSemanticsUnSupported tells the reflector that the fake cannot
// stream watch-lists.
func (*fakeKube) IsWatchListSemanticsUnSupported() bool { return true }

func (f *fakeKube) ListPods(_ context.Context, _ metav1.ListOptions) (*corev1.PodList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(f.rv)}}
	for _, p := range f.pods {
		out.Items = append(out.Items, *p.DeepCopy())
	}
	return out, nil
}

func (f *fakeKube) WatchPods(_ context.Context, _ metav1.ListOptions) (watch.Interface, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := watch.NewRaceFreeFake()
	f.watchers = append(f.watchers, w)
	return w, nil
}

// PatchPod applies a merge patch of metadata.annotations, the only one the
// exporter sends; anything else in the patch is an error.
func (f *fakeKube) PatchPod(_ context.Context, ns, name string, patch []byte) error {
	var p struct {
		Metadata struct {
			Annotations map[string]*string `json:"annotations"`
		} `json:"metadata"`
	}
	dec := json.NewDecoder(bytes.NewReader(patch))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return fmt.Errorf("fake: unexpected patch %s: %w", patch, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	pod, ok := f.pods[ns+"/"+name]
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, name)
	}
	pod = pod.DeepCopy()
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	for k, v := range p.Metadata.Annotations {
		if v == nil {
			delete(pod.Annotations, k)
		} else {
			pod.Annotations[k] = *v
		}
	}
	f.rv++
	pod.ResourceVersion = strconv.Itoa(f.rv)
	f.pods[ns+"/"+name] = pod
	live := f.watchers[:0]
	for _, w := range f.watchers {
		if !w.IsStopped() {
			w.Modify(pod.DeepCopy())
			live = append(live, w)
		}
	}
	f.watchers = live
	return nil
}

func (f *fakeKube) pod(ns, name string) *corev1.Pod {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pods[ns+"/"+name].DeepCopy()
}

func (f *fakeKube) ListResourceSlices(_ context.Context, node string) ([]resourcev1.ResourceSlice, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []resourcev1.ResourceSlice
	for _, s := range f.slices {
		if s.Spec.NodeName != nil && *s.Spec.NodeName == node {
			out = append(out, *s.DeepCopy())
		}
	}
	return out, nil
}

func (f *fakeKube) GetResourceClaim(_ context.Context, ns, name string) (*resourcev1.ResourceClaim, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.claims[ns+"/"+name]
	if !ok {
		return nil, apierrors.NewNotFound(resourcev1.Resource("resourceclaims"), name)
	}
	return c.DeepCopy(), nil
}

func (f *fakeKube) CreateEvent(_ context.Context, e *corev1.Event) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, *e.DeepCopy())
	return nil
}

func (f *fakeKube) eventsOf(name string) []corev1.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []corev1.Event
	for _, e := range f.events {
		if e.InvolvedObject.Name == name {
			out = append(out, e)
		}
	}
	return out
}
