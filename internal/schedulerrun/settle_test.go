package schedulerrun

import (
	"hash/fnv"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func pod(name, rv string, phase v1.PodPhase) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, ResourceVersion: rv}, Status: v1.PodStatus{Phase: phase}}
}

// TestViewHolds: a view holds a store's objects only when it has every one
// at its resourceVersion and nothing else; objects its keep func does not
// count are left out on both sides.
func TestViewHolds(t *testing.T) {
	running := func(obj any) bool { return obj.(*v1.Pod).Status.Phase != v1.PodSucceeded }
	v := NewView(running)
	v.Set(pod("a", "1", v1.PodRunning))
	v.Set(pod("b", "2", v1.PodRunning))
	for _, tc := range []struct {
		name  string
		store []any
		want  bool
	}{
		{"the same", []any{pod("a", "1", v1.PodRunning), pod("b", "2", v1.PodRunning)}, true},
		{"the same, another order", []any{pod("b", "2", v1.PodRunning), pod("a", "1", v1.PodRunning)}, true},
		{"a newer version in the store", []any{pod("a", "3", v1.PodRunning), pod("b", "2", v1.PodRunning)}, false},
		{"an object the view has not seen", []any{pod("a", "1", v1.PodRunning), pod("b", "2", v1.PodRunning), pod("c", "4", v1.PodRunning)}, false},
		{"an object gone from the store", []any{pod("a", "1", v1.PodRunning)}, false},
		{"an object not counted", []any{pod("a", "1", v1.PodRunning), pod("b", "2", v1.PodRunning), pod("d", "5", v1.PodSucceeded)}, true},
		{"empty", nil, false},
	} {
		if got := v.Holds(tc.store); got != tc.want {
			t.Errorf("%s: Holds = %v, want %v", tc.name, got, tc.want)
		}
	}
	if !NewView(nil).Holds(nil) {
		t.Error("an empty view does not hold an empty store")
	}
}

// TestEntryHash: the views' hash is FNV-1a of "key\x00rv", and an
// object's hash equals its key's, namespaced or not.
func TestEntryHash(t *testing.T) {
	for _, tc := range []struct{ ns, name, rv string }{{"default", "p", "12"}, {"", "node-1", "7"}, {"", "", ""}} {
		key := tc.name
		if tc.ns != "" {
			key = tc.ns + "/" + tc.name
		}
		h := fnv.New64a()
		h.Write([]byte(key + "\x00" + tc.rv))
		if got := entryHash(key, tc.rv); got != h.Sum64() {
			t.Errorf("entryHash(%q, %q) = %x, FNV-1a %x", key, tc.rv, got, h.Sum64())
		}
		obj := &metav1.ObjectMeta{Namespace: tc.ns, Name: tc.name, ResourceVersion: tc.rv}
		if got := entryHashOf(obj); got != entryHash(key, tc.rv) {
			t.Errorf("entryHashOf(%s) = %x, entryHash %x", key, got, entryHash(key, tc.rv))
		}
	}
}
