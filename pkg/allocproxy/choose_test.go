package allocproxy

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// cand builds a candidate created at t0+age seconds with a plan of GPUs
// (bus IDs, with UUIDs "GPU-<bus>" when uuids) and NICs.
func cand(name string, age int, uuids bool, gpus []string, nics ...string) Candidate {
	c := Candidate{Namespace: "ml", Name: name, UID: types.UID("uid-" + name), Created: t0.Add(time.Duration(age) * time.Second),
		Plan: annotations.Allocation{Node: "n", GPUs: gpus, NICs: nics}, Requests: map[string]int64{"nvidia.com/gpu": int64(len(gpus))}}
	if uuids {
		for _, g := range gpus {
			c.Plan.UUIDs = append(c.Plan.UUIDs, "GPU-"+g)
		}
	}
	return c
}

// plain is another scheduler's pod of gpus GPUs, without a plan.
func plain(name string, age int, gpus int64) Candidate {
	return Candidate{Namespace: "ml", Name: name, UID: types.UID("uid-" + name), Created: t0.Add(time.Duration(age) * time.Second),
		Requests: map[string]int64{"nvidia.com/gpu": gpus}, Unplanned: true}
}

func withOrder(c Candidate, rv uint64) Candidate {
	c.Order = rv
	return c
}

func gpuReq(size int, available ...string) Request {
	return Request{Resource: "nvidia.com/gpu", Kind: KindGPU, Size: size, Available: available}
}

func TestChoose(t *testing.T) {
	a := cand("a", 1, true, []string{"0000:15:00.0", "0000:16:00.0"}, "mlx5_0")
	b := cand("b", 2, true, []string{"0000:25:00.0", "0000:26:00.0"}, "mlx5_1")
	one := cand("one", 0, true, []string{"0000:35:00.0"}, "mlx5_2")
	byBus := cand("bus", 1, false, []string{"0000:15:00.0", "0000:16:00.0"}, "mlx5_0")
	allUUIDs := []string{"GPU-0000:15:00.0", "GPU-0000:16:00.0", "GPU-0000:25:00.0", "GPU-0000:26:00.0", "GPU-0000:35:00.0", "GPU-0000:36:00.0"}
	vf := func(name string, age int, n int64, nics ...string) Candidate {
		c := cand(name, age, false, []string{"0000:15:00.0"}, nics...)
		c.Requests["sriov"] = n
		return c
	}
	vfPF := map[string]string{"0000:18:00.2": "mlx5_0", "0000:18:00.3": "mlx5_0", "0000:28:00.2": "mlx5_1", "0000:28:00.3": "mlx5_1"}
	tests := []struct {
		name       string
		req        Request
		cands      []Candidate
		wantPod    string
		wantIDs    []string
		wantReason string
	}{
		{"the oldest pod of that size gets its plan", gpuReq(2, allUUIDs...), []Candidate{b, a, one},
			"a", []string{"GPU-0000:15:00.0", "GPU-0000:16:00.0"}, ""},
		{"back to back: once a is realized, b gets its own plan", gpuReq(2, allUUIDs[2:]...), []Candidate{b, one},
			"b", []string{"GPU-0000:25:00.0", "GPU-0000:26:00.0"}, ""},
		{"the first bound, not the first created", gpuReq(2, allUUIDs...), []Candidate{withOrder(a, 9), withOrder(b, 7)},
			"b", []string{"GPU-0000:25:00.0", "GPU-0000:26:00.0"}, ""},
		{"size picks the pod", gpuReq(1, allUUIDs...), []Candidate{a, b, one},
			"one", []string{"GPU-0000:35:00.0"}, ""},
		{"no pod with a plan of that size", gpuReq(4, allUUIDs...), []Candidate{a, b, one}, "", nil, ReasonNoPlan},
		{"no candidates", gpuReq(1, allUUIDs...), nil, "", nil, ReasonNoPlan},
		{"a plain pod of that size bound first: the request is its own", gpuReq(2, allUUIDs...), []Candidate{withOrder(a, 9), withOrder(plain("p", 5, 2), 8)},
			"p", nil, ReasonNoPlan},
		{"a plain pod bound after: the plan is followed", gpuReq(2, allUUIDs...), []Candidate{withOrder(a, 7), withOrder(plain("p", 0, 2), 8)},
			"a", []string{"GPU-0000:15:00.0", "GPU-0000:16:00.0"}, ""},
		{"a plain pod of another size does not count", gpuReq(2, allUUIDs...), []Candidate{withOrder(a, 9), withOrder(plain("p", 0, 4), 8)},
			"a", []string{"GPU-0000:15:00.0", "GPU-0000:16:00.0"}, ""},
		{"an older plan that cannot be followed, then a plain pod: the plain pod's", gpuReq(2, allUUIDs[1:]...), []Candidate{withOrder(a, 7), withOrder(plain("p", 0, 2), 8), withOrder(b, 9)},
			"p", nil, ReasonNoPlan},
		{"the oldest pod's GPUs are taken: the next that fits", gpuReq(2, allUUIDs[1:]...), []Candidate{a, b},
			"b", []string{"GPU-0000:25:00.0", "GPU-0000:26:00.0"}, ""},
		{"every plan's GPUs taken: fall back, naming the oldest pod", gpuReq(2, allUUIDs[4:]...), []Candidate{b, a},
			"a", nil, ReasonTaken},
		{"the kubelet must include a GPU the plan does not name", Request{Resource: "nvidia.com/gpu", Kind: KindGPU, Size: 2, Available: allUUIDs, MustInclude: []string{"GPU-0000:36:00.0"}},
			[]Candidate{a}, "a", nil, ReasonMustInclude},
		{"a device plugin naming GPUs by bus ID", gpuReq(2, "0000:15:00.0", "0000:16:00.0", "0000:25:00.0"), []Candidate{byBus},
			"bus", []string{"0000:15:00.0", "0000:16:00.0"}, ""},
		{"a plan with UUIDs, a device plugin with bus IDs", gpuReq(2, "0000:15:00.0", "0000:16:00.0"), []Candidate{a},
			"a", []string{"0000:15:00.0", "0000:16:00.0"}, ""},
		{"a plan without UUIDs, a device plugin with UUIDs", gpuReq(2, allUUIDs...), []Candidate{byBus},
			"bus", nil, ReasonUnknownIDs},
		{"VFs of the planned NIC", Request{Resource: "sriov", Kind: KindVF, Size: 2, Available: []string{"0000:28:00.2", "0000:18:00.3", "0000:18:00.2"}},
			[]Candidate{vf("v", 1, 2, "mlx5_0")}, "v", []string{"0000:18:00.2", "0000:18:00.3"}, ""},
		{"VFs: not enough on the planned NIC", Request{Resource: "sriov", Kind: KindVF, Size: 2, Available: []string{"0000:28:00.2", "0000:18:00.3"}},
			[]Candidate{vf("v", 1, 2, "mlx5_0")}, "v", nil, ReasonTaken},
		{"VFs: a plan without NICs", Request{Resource: "sriov", Kind: KindVF, Size: 1, Available: []string{"0000:18:00.2"}},
			[]Candidate{vf("v", 1, 1)}, "v", nil, ReasonNoPlan},
		{"VFs: must include one of another NIC", Request{Resource: "sriov", Kind: KindVF, Size: 1, Available: []string{"0000:18:00.2"}, MustInclude: []string{"0000:28:00.2"}},
			[]Candidate{vf("v", 1, 1, "mlx5_0")}, "v", nil, ReasonMustInclude},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Choose(tc.req, tc.cands, vfPF)
			pod := ""
			if got.Pod != nil {
				pod = got.Pod.Name
			}
			if diff := cmp.Diff([]any{tc.wantPod, tc.wantIDs, tc.wantReason}, []any{pod, got.IDs, got.Reason}); diff != "" {
				t.Errorf("(-want,+got):\n%s\nmessage: %s", diff, got.Message)
			}
			if got.IDs == nil && got.Message == "" {
				t.Error("a fallback without a message")
			}
		})
	}
}

// FuzzChoose: whatever the kubelet sends (available and must-include IDs,
// sizes, a VF map), a followed plan names exactly Size distinct available
// devices including those the kubelet must include.
func FuzzChoose(f *testing.F) {
	f.Add("GPU-0000:15:00.0,GPU-0000:16:00.0,GPU-0000:25:00.0", "", 2, false)
	f.Add("0000:18:00.2,0000:18:00.3", "0000:18:00.3", 1, true)
	f.Fuzz(func(t *testing.T, available, must string, size int, vf bool) {
		if size < 0 || size > 64 {
			return
		}
		split := func(s string) []string {
			if s == "" {
				return nil
			}
			return strings.Split(s, ",")
		}
		req := Request{Resource: "nvidia.com/gpu", Kind: KindGPU, Size: size, Available: split(available), MustInclude: split(must)}
		if vf {
			req.Resource, req.Kind = "sriov", KindVF
		}
		cands := []Candidate{
			cand("a", 1, true, []string{"0000:15:00.0", "0000:16:00.0"}, "mlx5_0"),
			cand("b", 2, false, []string{"0000:25:00.0"}, "mlx5_1"),
		}
		for i := range cands {
			cands[i].Requests["sriov"] = int64(size)
		}
		got := Choose(req, cands, map[string]string{"0000:18:00.2": "mlx5_0", "0000:18:00.3": "mlx5_0"})
		if got.IDs == nil {
			return
		}
		if len(got.IDs) != size {
			t.Fatalf("%d IDs for a request of %d", len(got.IDs), size)
		}
		seen := map[string]bool{}
		for _, id := range got.IDs {
			if seen[id] || !strings.Contains(","+available+",", ","+id+",") {
				t.Fatalf("ID %q repeated or not available: %v", id, got.IDs)
			}
			seen[id] = true
		}
		for _, m := range req.MustInclude {
			if !seen[m] {
				t.Fatalf("must-include %q missing from %v", m, got.IDs)
			}
		}
	})
}

// TestChooseRefusesRepeatedDevices: a plan whose UUIDs name one GPU twice
// never reaches the kubelet as a device listed twice.
func TestChooseRefusesRepeatedDevices(t *testing.T) {
	c := Candidate{Namespace: "default", Name: "p", Requests: map[string]int64{"nvidia.com/gpu": 2},
		Plan: annotations.Allocation{Node: "n", GPUs: []string{"0000:10:00.0", "0000:20:00.0"}, UUIDs: []string{"GPU-0", "GPU-0"}}}
	ch := Choose(Request{Resource: "nvidia.com/gpu", Kind: KindGPU, Available: []string{"GPU-0", "GPU-1"}, Size: 2}, []Candidate{c}, nil)
	if ch.IDs != nil || ch.Reason != ReasonBadPlan {
		t.Errorf("Choose = %+v, want no IDs and reason %s", ch, ReasonBadPlan)
	}
}

// TestUnplanned: a request without a plan is offered the devices no
// pending plan names, unless too few remain.
func TestUnplanned(t *testing.T) {
	a := cand("a", 1, true, []string{"0000:15:00.0", "0000:16:00.0"}, "mlx5_0")
	byBus := cand("bus", 1, false, []string{"0000:25:00.0"}, "mlx5_1")
	uuids := []string{"GPU-0000:15:00.0", "GPU-0000:16:00.0", "GPU-0000:25:00.0", "GPU-0000:26:00.0"}
	buses := []string{"0000:15:00.0", "0000:16:00.0", "0000:25:00.0", "0000:26:00.0"}
	must := gpuReq(2, uuids...)
	must.MustInclude = []string{"GPU-0000:15:00.0"}
	for _, tc := range []struct {
		name  string
		req   Request
		cands []Candidate
		want  []string
	}{
		{"no plans: everything", gpuReq(1, uuids...), nil, uuids},
		{"a's GPUs by UUID are held back", gpuReq(2, uuids...), []Candidate{a}, uuids[2:]},
		{"GPUs named by bus ID are held back", gpuReq(1, buses...), []Candidate{byBus}, []string{"0000:15:00.0", "0000:16:00.0", "0000:26:00.0"}},
		{"too few left: everything", gpuReq(3, uuids...), []Candidate{a}, uuids},
		{"a must-include stays", must, []Candidate{a}, []string{"GPU-0000:15:00.0", "GPU-0000:25:00.0", "GPU-0000:26:00.0"}},
		{"VFs are the vendor's", Request{Resource: "sriov", Kind: KindVF, Size: 1, Available: []string{"0000:18:00.2"}}, []Candidate{a}, []string{"0000:18:00.2"}},
	} {
		if diff := cmp.Diff(tc.want, Unplanned(tc.req, tc.cands)); diff != "" {
			t.Errorf("%s (-want,+got):\n%s", tc.name, diff)
		}
	}
}
