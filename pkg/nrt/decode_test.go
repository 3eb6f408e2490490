package nrt_test

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/nrt/nrttest"
)

// hostileQuantities would take seconds or more to parse.
var hostileQuantities = []string{
	"12345678901234567890e1000000000",
	"1e10000000",
	"1E-10000000",
	"1e+10000000",
	"1" + strings.Repeat("0", 100),
}

func unstructuredOf(t testing.TB, obj any) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// TestDecode: a real object decodes and compiles as the typed one does;
// hostile quantities and oversized objects are refused, quickly, with the
// zone named, before anything parses them.
func TestDecode(t *testing.T) {
	obj := nrttest.HalfNICs("n", 0, 1, 2, 3)
	got, err := nrt.Decode(unstructuredOf(t, obj))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nrt.Compile(got, "nvidia.com/gpu"); err != nil {
		t.Fatalf("decoded object does not compile: %v", err)
	}
	for _, q := range hostileQuantities {
		u := unstructuredOf(t, obj)
		zones, _, _ := unstructured.NestedSlice(u.Object, "zones")
		for _, z := range zones {
			if rs, ok := z.(map[string]any)["resources"].([]any); ok && len(rs) > 0 {
				rs[0].(map[string]any)["available"] = q
				break
			}
		}
		_ = unstructured.SetNestedSlice(u.Object, zones, "zones")
		start := time.Now()
		_, err := nrt.Decode(u)
		// A hang guard, not a speed goal: parsing this quantity would take
		// seconds; BenchmarkDecodeHostile measures the refusal.
		if took := time.Since(start); took > time.Second {
			t.Errorf("%q: refused after %s", q, took)
		}
		if err == nil || !strings.Contains(err.Error(), "available") {
			t.Errorf("%q: error %v, want one naming the field", q, err)
		}
	}
	u := unstructuredOf(t, obj)
	many := make([]any, nrt.MaxZones+1)
	for i := range many {
		many[i] = map[string]any{"name": "z"}
	}
	_ = unstructured.SetNestedSlice(u.Object, many, "zones")
	if _, err := nrt.Decode(u); err == nil || !strings.Contains(err.Error(), "zones: at most") {
		t.Errorf("too many zones: %v", err)
	}
	u = unstructuredOf(t, obj)
	_ = unstructured.SetNestedField(u.Object, "not a list", "zones")
	if _, err := nrt.Decode(u); err == nil {
		t.Error("zones of the wrong type: no error")
	}
}

func BenchmarkDecodeHostile(b *testing.B) {
	u := unstructuredOf(b, nrttest.HalfNICs("n", 0, 1))
	zones, _, _ := unstructured.NestedSlice(u.Object, "zones")
	for _, z := range zones {
		if rs, ok := z.(map[string]any)["resources"].([]any); ok && len(rs) > 0 {
			rs[0].(map[string]any)["available"] = hostileQuantities[0]
		}
	}
	_ = unstructured.SetNestedSlice(u.Object, zones, "zones")
	for b.Loop() {
		if _, err := nrt.Decode(u); err == nil {
			b.Fatal("accepted")
		}
	}
}

func TestCheckQuantity(t *testing.T) {
	for _, ok := range []string{"8", "0", "100Gi", "1e3", "1.5E+2", "2Ki", "123456789012345678901234567890"} {
		if err := nrt.CheckQuantity(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range hostileQuantities {
		if err := nrt.CheckQuantity(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, q := range append(hostileQuantities, "8", "1e3", "-1") {
		f.Add(q)
	}
	obj := nrttest.HalfNICs("n", 0, 1)
	f.Fuzz(func(t *testing.T, q string) {
		u := unstructuredOf(t, obj)
		zones, _, _ := unstructured.NestedSlice(u.Object, "zones")
		for _, z := range zones {
			if rs, ok := z.(map[string]any)["resources"].([]any); ok && len(rs) > 0 {
				rs[0].(map[string]any)["capacity"] = q
			}
		}
		_ = unstructured.SetNestedSlice(u.Object, zones, "zones")
		start := time.Now()
		o, err := nrt.Decode(u)
		if err == nil {
			_, _ = nrt.Compile(o, "nvidia.com/gpu")
		}
		if took := time.Since(start); took > 100*time.Millisecond {
			t.Fatalf("%q: %s to decode and compile", q, took)
		}
	})
}
