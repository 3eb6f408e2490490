package nrt_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// BenchmarkDecodeCompileLargest: what the largest admitted object costs the
// scheduler on every update (measurements/hostile-object.md).
func BenchmarkDecodeCompileLargest(b *testing.B) {
	u := unstructuredOf(b, nrttest.Largest("n"))
	for b.Loop() {
		o, err := nrt.Decode(u)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := nrt.Compile(o, "nvidia.com/gpu"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDecodeMatchesConverter: Decode reads real objects (and the largest
// the caps admit) exactly as runtime's converter does.
func TestDecodeMatchesConverter(t *testing.T) {
	half := nrttest.HalfNICs("n", 0, 1, 2, 3)
	half.ResourceVersion, half.Generation, half.TopologyPolicies = "42", 3, []string{"None"}
	half.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: nrt.ExporterFieldManager, Operation: metav1.ManagedFieldsOperationApply}}
	half.Zones[0].Resources = v1alpha2.ResourceInfoList{nrttest.Res("cpu", 64, 60), {Name: "memory",
		Capacity: resource.MustParse("512Gi"), Allocatable: resource.MustParse("500Gi"), Available: resource.MustParse("1.5")}}
	for name, obj := range map[string]*v1alpha2.NodeResourceTopology{"half NICs": half, "largest": nrttest.Largest("big")} {
		u := unstructuredOf(t, obj)
		want := &v1alpha2.NodeResourceTopology{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, want); err != nil {
			t.Fatal(err)
		}
		got, err := nrt.Decode(u)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
			t.Errorf("%s: Decode differs from the converter (-want,+got):\n%s", name, diff)
		}
	}
	// JSON numbers arrive as int64 or float64.
	u := unstructuredOf(t, half)
	z := u.Object["zones"].([]any)[0].(map[string]any)
	z["resources"].([]any)[0].(map[string]any)["available"] = int64(7)
	z["resources"].([]any)[1].(map[string]any)["available"] = 2.5
	got, err := nrt.Decode(u)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := got.Zones[0].Resources[0].Available.Value(), got.Zones[0].Resources[1].Available.MilliValue(); a != 7 || b != 2500 {
		t.Errorf("numbers decoded as %d and %dm, want 7 and 2500m", a, b)
	}
}

// TestDecodeBadInput: each cap and each wrong type is refused with an error
// that names where it is.
func TestDecodeBadInput(t *testing.T) {
	repeat := func(n int, e func(i int) any) []any {
		out := make([]any, n)
		for i := range out {
			out[i] = e(i)
		}
		return out
	}
	named := func(i int) any { return map[string]any{"name": fmt.Sprintf("x%d", i), "value": "v"} }
	for _, tc := range []struct {
		name   string
		mutate func(u map[string]any, zone map[string]any)
		want   string
	}{
		{"zone name not a string", func(_, z map[string]any) { z["name"] = int64(3) }, "zone 0: name is a int64, not a string"},
		{"zone name too long", func(_, z map[string]any) { z["name"] = strings.Repeat("z", nrt.MaxNameLen+1) }, "name of 254 bytes, at most 253"},
		{"too many costs in a zone", func(_, z map[string]any) {
			z["costs"] = repeat(nrt.MaxCostsPerZone+1, func(i int) any { return map[string]any{"name": fmt.Sprint(i), "value": int64(10)} })
		}, "zone node-0: 129 costs: at most 128"},
		{"cost value not an integer", func(_, z map[string]any) { z["costs"] = []any{map[string]any{"name": "a", "value": "ten"}} }, "zone node-0: cost 0: value is a string"},
		{"too many attributes in a zone", func(_, z map[string]any) { z["attributes"] = repeat(nrt.MaxAttributesPerZone+1, named) }, "zone node-0: 129 attributes: at most 128"},
		{"attribute value too long", func(_, z map[string]any) {
			z["attributes"] = []any{map[string]any{"name": "a", "value": strings.Repeat("v", nrt.MaxValueLen+1)}}
		}, "zone node-0: attribute 0: value of 2049 bytes, at most 2048"},
		{"too many top-level attributes", func(u, _ map[string]any) { u["attributes"] = repeat(nrt.MaxAttributes+1, named) }, "8193 attributes: at most 8192"},
		{"attributes not a list", func(u, _ map[string]any) { u["attributes"] = "x" }, "attributes is a string, not a list"},
		{"resource entry not an object", func(_, z map[string]any) { z["resources"] = []any{"cpu"} }, "zone node-0: resources 0 is not an object"},
		{"quantity of a wrong type", func(_, z map[string]any) { z["resources"] = []any{map[string]any{"name": "cpu", "capacity": true}} }, "zone node-0: resource 0: capacity is a bool, not a quantity"},
		{"quantity that does not parse", func(_, z map[string]any) { z["resources"] = []any{map[string]any{"name": "cpu", "capacity": "lots"}} }, "zone node-0: resource 0: capacity"},
		{"topologyPolicies not strings", func(u, _ map[string]any) { u["topologyPolicies"] = []any{int64(1)} }, "topologyPolicies 0 is not a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := unstructuredOf(t, nrttest.HalfNICs("n", 0, 1))
			tc.mutate(u.Object, u.Object["zones"].([]any)[0].(map[string]any))
			_, err := nrt.Decode(u)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	// Totals over zones.
	u := unstructuredOf(t, nrttest.Largest("big"))
	zones := u.Object["zones"].([]any)
	last := zones[len(zones)-1].(map[string]any)
	last["costs"] = []any{map[string]any{"name": "node-0", "value": int64(10)}}
	if _, err := nrt.Decode(u); err == nil || !strings.Contains(err.Error(), "more than 8192 costs in all") {
		t.Errorf("one cost over the total: %v", err)
	}
}

// TestCompileSizeCaps: Compile holds typed objects (from tools, tests, the
// simulator) to the caps Decode checks: the largest admitted object
// compiles, one entry more does not.
func TestCompileSizeCaps(t *testing.T) {
	if _, err := nrt.Compile(nrttest.Largest("big"), "nvidia.com/gpu"); err != nil {
		t.Fatalf("the largest admitted object: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(o *v1alpha2.NodeResourceTopology)
		want   string
	}{
		{"a cost over a zone's cap", func(o *v1alpha2.NodeResourceTopology) {
			o.Zones[2].Costs = append(o.Zones[2].Costs, v1alpha2.CostInfo{Name: "node-0", Value: 10})
		}, "zone gpu-0: 129 costs, at most 128"},
		{"a cost over the total", func(o *v1alpha2.NodeResourceTopology) {
			o.Zones[len(o.Zones)-1].Costs = []v1alpha2.CostInfo{{Name: "node-0", Value: 10}}
		}, "8193 costs in all, at most 8192"},
		{"an attribute value too long", func(o *v1alpha2.NodeResourceTopology) {
			o.Zones[2].Attributes[0].Value = strings.Repeat("v", nrt.MaxValueLen+1)
		}, "value of 2049 bytes"},
		{"a parent name too long", func(o *v1alpha2.NodeResourceTopology) {
			o.Zones[2].Parent = strings.Repeat("\xff", 1<<20)
		}, "zone gpu-0: parent of 1048576 bytes, at most 253"},
		{"a cost name too long", func(o *v1alpha2.NodeResourceTopology) {
			o.Zones[2].Costs[0].Name = strings.Repeat("c", nrt.MaxNameLen+1)
		}, "zone gpu-0: cost name of 254 bytes"},
		{"a resource name too long", func(o *v1alpha2.NodeResourceTopology) {
			o.Zones[2].Resources[0].Name = strings.Repeat("r", nrt.MaxNameLen+1)
		}, "zone gpu-0: resource name of 254 bytes"},
		{"an attribute name too long", func(o *v1alpha2.NodeResourceTopology) {
			o.Zones[2].Attributes[0].Name = strings.Repeat("a", nrt.MaxNameLen+1)
		}, "zone gpu-0: attribute name of 254 bytes"},
		{"a type too long", func(o *v1alpha2.NodeResourceTopology) {
			o.Zones[2].Type = strings.Repeat("t", nrt.MaxNameLen+1)
		}, "zone gpu-0: type of 254 bytes"},
		{"a resource over the total", func(o *v1alpha2.NodeResourceTopology) {
			o.Zones[len(o.Zones)-1].Resources = append(o.Zones[len(o.Zones)-1].Resources, nrttest.Res("x", 1, 1))
		}, "1025 resources in all"},
	} {
		o := nrttest.Largest("big")
		tc.mutate(o)
		if _, err := nrt.Compile(o, "nvidia.com/gpu"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %.200v, want %q", tc.name, err, tc.want)
		}
	}
}

// BenchmarkDecodeCompileLargestConverter is the same object through
// runtime's reflective converter instead of Decode: the A/B that keeps the
// hand decoder (measurements/hostile-object.md).
func BenchmarkDecodeCompileLargestConverter(b *testing.B) {
	u := unstructuredOf(b, nrttest.Largest("n"))
	for b.Loop() {
		o := &v1alpha2.NodeResourceTopology{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, o); err != nil {
			b.Fatal(err)
		}
		if _, err := nrt.Compile(o, "nvidia.com/gpu"); err != nil {
			b.Fatal(err)
		}
	}
}
