package allocproxy

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	v1helper "k8s.io/kubernetes/pkg/apis/core/v1/helper"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
)

func TestCandidateOf(t *testing.T) {
	plan := annotations.Marshal(annotations.Allocation{Node: "n", GPUs: []string{"0000:15:00.0"}})
	pod := func(mutate func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "p", Annotations: map[string]string{annotations.AllocationKey: plan}},
			Spec: corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}, Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}},
		}
		if mutate != nil {
			mutate(p)
		}
		return p
	}
	now := metav1.Now()
	tests := []struct {
		name string
		pod  *corev1.Pod
		want bool
		// wantUnplanned: PodPlans lists it as another scheduler's pod.
		wantUnplanned bool
	}{
		{"a planned pod of this node", pod(nil), true, false},
		{"another node", pod(func(p *corev1.Pod) { p.Spec.NodeName = "m" }), false, false},
		{"a plan for another node", pod(func(p *corev1.Pod) {
			p.Annotations[annotations.AllocationKey] = annotations.Marshal(annotations.Allocation{Node: "m", GPUs: []string{"0000:15:00.0"}})
		}), false, true},
		{"no plan", pod(func(p *corev1.Pod) { delete(p.Annotations, annotations.AllocationKey) }), false, true},
		{"a plan that is not JSON", pod(func(p *corev1.Pod) { p.Annotations[annotations.AllocationKey] = "{" }), false, true},
		{"a plan with a garbage bus ID", pod(func(p *corev1.Pod) {
			p.Annotations[annotations.AllocationKey] = `{"node":"n","gpus":["x"],"nrtGeneration":0}`
		}), false, true},
		{"a plan with unknown fields", pod(func(p *corev1.Pod) {
			p.Annotations[annotations.AllocationKey] = `{"node":"n","gpus":[],"nrtGeneration":0,"more":1}`
		}), false, true},
		{"a plan with more UUIDs than GPUs", pod(func(p *corev1.Pod) {
			p.Annotations[annotations.AllocationKey] = `{"node":"n","gpus":["0000:15:00.0"],"uuids":["a","b"],"nrtGeneration":0}`
		}), false, true},
		{"finished", pod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }), false, false},
		{"failed", pod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed }), false, false},
		{"being deleted", pod(func(p *corev1.Pod) { p.DeletionTimestamp = &now }), false, false},
		{"no plan and no requests", pod(func(p *corev1.Pod) {
			delete(p.Annotations, annotations.AllocationKey)
			p.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
		}), false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := CandidateOf("n", tc.pod)
			if ok != tc.want {
				t.Fatalf("candidate = %v, want %v", ok, tc.want)
			}
			if ok && (c.Requests["nvidia.com/gpu"] != 1 || c.Key() != "ml/p" || len(c.Plan.GPUs) != 1) {
				t.Errorf("candidate %+v", c)
			}
			u, ok := unplannedOf("n", tc.pod)
			if want := tc.wantUnplanned || tc.want; ok != want {
				t.Fatalf("unplanned = %v, want %v", ok, want)
			}
			if ok && (!u.Unplanned || u.Requests["nvidia.com/gpu"] != 1 || len(u.Plan.GPUs) != 0) {
				t.Errorf("unplanned candidate %+v", u)
			}
		})
	}
}

// TestIsExtendedResourceName holds the proxy's copy of the apiserver's rule
// equal to k8s.io/kubernetes' own.
func TestIsExtendedResourceName(t *testing.T) {
	for _, name := range []string{"nvidia.com/gpu", "rdma/hca", "openshift.io/sriov_highnet", "cpu", "kubernetes.io/gpu",
		"example.kubernetes.io/x", "requests.example.com/x", "a/b/c", "/gpu", "nvidia.com/", "nvidia.com/gpu\x00", "Nvidia.com/GPU",
		"x.io/" + strings.Repeat("a", 63), "x.io/" + strings.Repeat("a", 64), "-x.io/gpu", "x.io/-gpu", ""} {
		if got, want := isExtendedResourceName(name), v1helper.IsExtendedResourceName(corev1.ResourceName(name)); got != want {
			t.Errorf("isExtendedResourceName(%q) = %v, k8s.io/kubernetes says %v", name, got, want)
		}
	}
}

func TestValidRegistration(t *testing.T) {
	ok := func() *pluginapi.RegisterRequest {
		return &pluginapi.RegisterRequest{Version: pluginapi.Version, Endpoint: "nvidia-gpu.sock", ResourceName: "nvidia.com/gpu"}
	}
	tests := []struct {
		name    string
		mutate  func(*pluginapi.RegisterRequest)
		wantErr string
	}{
		{"valid", func(*pluginapi.RegisterRequest) {}, ""},
		{"old API", func(r *pluginapi.RegisterRequest) { r.Version = "v1alpha" }, `version "v1alpha"`},
		{"no resource", func(r *pluginapi.RegisterRequest) { r.ResourceName = "" }, "resource name"},
		{"resource without a domain", func(r *pluginapi.RegisterRequest) { r.ResourceName = "gpu" }, "resource name"},
		{"huge resource", func(r *pluginapi.RegisterRequest) { r.ResourceName = "a/" + strings.Repeat("x", 300) }, "resource name"},
		{"endpoint leaving the directory", func(r *pluginapi.RegisterRequest) { r.Endpoint = "../kubelet.sock" }, "endpoint"},
		{"endpoint with a path", func(r *pluginapi.RegisterRequest) { r.Endpoint = "/var/lib/kubelet/device-plugins/kubelet.sock" }, "endpoint"},
		{"hidden endpoint", func(r *pluginapi.RegisterRequest) { r.Endpoint = ".." }, "endpoint"},
		{"no endpoint", func(r *pluginapi.RegisterRequest) { r.Endpoint = "" }, "endpoint"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ok()
			tc.mutate(r)
			err := validRegistration(r)
			if (err == nil) != (tc.wantErr == "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

// TestCandidateSetsIBHCA: a pod whose container (init containers too) sets
// NCCL_IB_HCA, literally or from a reference, is one the proxy leaves alone.
func TestCandidateSetsIBHCA(t *testing.T) {
	plan := annotations.Marshal(annotations.Allocation{Node: "n", GPUs: []string{"0000:15:00.0"}})
	for _, tc := range []struct {
		name string
		spec corev1.PodSpec
		want bool
	}{
		{"no env", corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}, false},
		{"other env", corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Env: []corev1.EnvVar{{Name: "NCCL_DEBUG", Value: "INFO"}}}}}, false},
		{"literal", corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Env: []corev1.EnvVar{{Name: EnvIBHCA, Value: "mlx5_0"}}}}}, true},
		{"from a ConfigMap key", corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Env: []corev1.EnvVar{{Name: EnvIBHCA,
			ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{Key: "hca"}}}}}}}, true},
		{"an init container", corev1.PodSpec{InitContainers: []corev1.Container{{Name: "i", Env: []corev1.EnvVar{{Name: EnvIBHCA, Value: "=mlx5_1"}}}},
			Containers: []corev1.Container{{Name: "c"}}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.spec.NodeName = "n"
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "p", Annotations: map[string]string{annotations.AllocationKey: plan}}, Spec: tc.spec}
			c, ok := CandidateOf("n", p)
			if !ok || c.SetsIBHCA != tc.want {
				t.Errorf("candidate %v, SetsIBHCA %v; want %v", ok, c.SetsIBHCA, tc.want)
			}
		})
	}
}

// TestOwnerCannotReorder: a pod's owner who bumps its pod's
// resourceVersion after the binding (a label patch) does not move it
// among the candidates: the order is the binding's, as the informer first
// saw it bound. Without the binding orders it would move.
func TestOwnerCannotReorder(t *testing.T) {
	plan := annotations.Marshal(annotations.Allocation{Node: "n", GPUs: []string{"0000:15:00.0"}})
	pod := func(name, rv string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: name, UID: types.UID("uid-" + name), ResourceVersion: rv,
			Annotations: map[string]string{annotations.AllocationKey: plan}},
			Spec: corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}}}
	}
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	orders := NewBindingOrders("n")
	h := orders.Handler()
	a, b := pod("a", "100"), pod("b", "101")
	for _, p := range []*corev1.Pod{a, b} {
		_ = idx.Add(p)
		h.OnAdd(p, false)
	}
	bumped := pod("a", "200")
	_ = idx.Update(bumped)
	h.OnUpdate(a, bumped)
	orderOf := func(pp PodPlans) map[string]uint64 {
		got := map[string]uint64{}
		for _, c := range pp.Candidates() {
			got[c.Name] = c.Order
		}
		return got
	}
	lister := corelisters.NewPodLister(idx)
	if diff := cmp.Diff(map[string]uint64{"a": 100, "b": 101}, orderOf(PodPlans{Node: "n", Lister: lister, Orders: orders})); diff != "" {
		t.Errorf("binding orders (-want,+got):\n%s", diff)
	}
	if got := orderOf(PodPlans{Node: "n", Lister: lister}); got["a"] != 200 {
		t.Errorf("without binding orders a's order is %d: the negative check wants the bump (200) to show", got["a"])
	}
	h.OnDelete(bumped)
	if o := orders.of(bumped.UID, 7); o != 7 {
		t.Errorf("a deleted pod's order was kept: %d", o)
	}
}
