package dra_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/nicaffinity/nicaffinity/internal/drasim"
	"github.com/nicaffinity/nicaffinity/pkg/dra"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

func hgx(t testing.TB) *topology.Topology {
	t.Helper()
	topo, err := machines.Discover(t.TempDir(), machines.HGXH100)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// claim builds an allocated claim.
func claim(name string, results ...resourcev1.DeviceRequestAllocationResult) *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{
			Devices: resourcev1.DeviceAllocationResult{Results: results},
		}},
	}
}

func result(driver, pool, device string) resourcev1.DeviceRequestAllocationResult {
	return resourcev1.DeviceRequestAllocationResult{Request: "r", Driver: driver, Pool: pool, Device: device}
}

// TestMapPod: a pod's allocated GPU and NIC map to their PCI addresses
// through the node's slices.
func TestMapPod(t *testing.T) {
	topo := hgx(t)
	slices := drasim.Slices("n1", topo)
	x := dra.IndexSlices(slices, "n1")
	if len(x.Problems) != 0 {
		t.Fatalf("problems indexing well-formed slices: %v", x.Problems)
	}
	nic0 := strings.ReplaceAll(topo.NICs[0].Name, "_", "-")
	admin := result(drasim.GPUDriver, "n1", "gpu-7")
	admin.AdminAccess = ptr.To(true)
	for _, tc := range []struct {
		name   string
		claims []*resourcev1.ResourceClaim
		want   dra.PodDevices
	}{{
		name:   "a GPU and its NIC in one claim",
		claims: []*resourcev1.ResourceClaim{claim("c", result(drasim.GPUDriver, "n1", "gpu-0"), result(drasim.NICDriver, "n1", nic0))},
		want:   dra.PodDevices{PCI: sortedStrings(topo.GPUs[0].PCI.Address, topo.NICs[0].PCI.Address)},
	}, {
		name:   "the same device through two claims counts once",
		claims: []*resourcev1.ResourceClaim{claim("a", result(drasim.GPUDriver, "n1", "gpu-1")), claim("b", result(drasim.GPUDriver, "n1", "gpu-1"))},
		want:   dra.PodDevices{PCI: []string{topo.GPUs[1].PCI.Address}},
	}, {
		name:   "admin access is not the pod's device",
		claims: []*resourcev1.ResourceClaim{claim("c", admin)},
		want:   dra.PodDevices{},
	}, {
		name:   "not allocated yet",
		claims: []*resourcev1.ResourceClaim{{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "pending"}}},
		want:   dra.PodDevices{},
	}, {
		name:   "a device no slice of the node publishes",
		claims: []*resourcev1.ResourceClaim{claim("c", result(drasim.GPUDriver, "n2", "gpu-0"))},
		want:   dra.PodDevices{Problems: []string{"ResourceClaim default/c holds gpu.nvidia.com/n2/gpu-0, which no ResourceSlice of this node publishes"}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, x.MapPod(tc.claims)); diff != "" {
				t.Errorf("MapPod (-want,+got):\n%s", diff)
			}
		})
	}
}

func sortedStrings(a, b string) []string {
	if a > b {
		a, b = b, a
	}
	return []string{a, b}
}

// TestIndexSlicesBadInput: slices of other nodes and older generations are
// not read; bad addresses and devices without one are reported or left
// out; the bounds hold.
func TestIndexSlicesBadInput(t *testing.T) {
	dev := func(name, bus string) resourcev1.Device {
		d := resourcev1.Device{Name: name, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{}}
		if bus != "" {
			d.Attributes[dra.AttrPCIBusID] = resourcev1.DeviceAttribute{StringValue: ptr.To(bus)}
		}
		return d
	}
	slice := func(node string, gen int64, devs ...resourcev1.Device) resourcev1.ResourceSlice {
		return resourcev1.ResourceSlice{Spec: resourcev1.ResourceSliceSpec{Driver: "d", NodeName: ptr.To(node),
			Pool: resourcev1.ResourcePool{Name: "p", Generation: gen, ResourceSliceCount: 1}, Devices: devs}}
	}
	ref := func(dev string) dra.DeviceRef { return dra.DeviceRef{Driver: "d", Pool: "p", Device: dev} }
	many := make([]resourcev1.Device, dra.MaxDevices+1)
	for i := range many {
		many[i] = dev(fmt.Sprintf("d%d", i), "0000:01:00.0")
	}
	for _, tc := range []struct {
		name         string
		slices       []resourcev1.ResourceSlice
		want         map[string]string // device -> PCI ("" = not indexed)
		wantProblems []string
	}{{
		name:   "another node's slice",
		slices: []resourcev1.ResourceSlice{slice("n2", 1, dev("a", "0000:01:00.0"))},
		want:   map[string]string{"a": ""},
	}, {
		name:   "an older generation of the pool",
		slices: []resourcev1.ResourceSlice{slice("n1", 1, dev("old", "0000:01:00.0")), slice("n1", 2, dev("new", "0000:02:00.0"))},
		want:   map[string]string{"old": "", "new": "0000:02:00.0"},
	}, {
		name:   "upper-case and short addresses are normalized",
		slices: []resourcev1.ResourceSlice{slice("n1", 1, dev("a", "0000:1B:00.0"), dev("b", "1b:00.1"))},
		want:   map[string]string{"a": "0000:1b:00.0", "b": "0000:1b:00.1"},
	}, {
		name:         "not an address",
		slices:       []resourcev1.ResourceSlice{slice("n1", 1, dev("a", "gpu0"), dev("b", strings.Repeat("x", 1000)))},
		want:         map[string]string{"a": "", "b": ""},
		wantProblems: []string{`device d/p/a: resource.kubernetes.io/pciBusID "gpu0" is no PCI address`, `device d/p/b: resource.kubernetes.io/pciBusID "` + strings.Repeat("x", 64) + `..." is no PCI address`},
	}, {
		name:   "no address: not a PCI device",
		slices: []resourcev1.ResourceSlice{slice("n1", 1, dev("cpu", ""))},
		want:   map[string]string{"cpu": ""},
	}, {
		name:         "too many devices",
		slices:       []resourcev1.ResourceSlice{slice("n1", 1, many...)},
		want:         map[string]string{"d0": "0000:01:00.0", fmt.Sprintf("d%d", dra.MaxDevices): ""},
		wantProblems: []string{fmt.Sprintf("more than %d devices in node n1's ResourceSlices: the rest are not read", dra.MaxDevices)},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			x := dra.IndexSlices(tc.slices, "n1")
			for dev, want := range tc.want {
				got, _ := x.PCI(ref(dev))
				if got != want {
					t.Errorf("%s: PCI %q, want %q", dev, got, want)
				}
			}
			if diff := cmp.Diff(tc.wantProblems, x.Problems); diff != "" {
				t.Errorf("problems (-want,+got):\n%s", diff)
			}
		})
	}
}

// FuzzIndexSlices: any ResourceSlice list the API could hand over indexes
// without panicking, and only to normalized PCI addresses.
func FuzzIndexSlices(f *testing.F) {
	seed, err := json.Marshal(drasim.Slices("n1", hgx(f)))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(`[{"spec":{"driver":"d","nodeName":"n1","pool":{"name":"p"},"devices":[{"name":"a","attributes":{"resource.kubernetes.io/pciBusID":{"string":"0000:zz:00.0"}}}]}}]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var slices []resourcev1.ResourceSlice
		if json.Unmarshal(b, &slices) != nil {
			return
		}
		x := dra.IndexSlices(slices, "n1")
		for _, s := range slices {
			for _, d := range s.Spec.Devices {
				if bus, ok := x.PCI(dra.DeviceRef{Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name, Device: d.Name}); ok {
					if n, err := topology.NormalizeBusID(bus); err != nil || n != bus {
						t.Fatalf("indexed %q, not a normalized address", bus)
					}
				}
			}
		}
	})
}
