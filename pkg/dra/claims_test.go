package dra

import (
	"context"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
	"github.com/nicaffinity/nicaffinity/pkg/topology/sysfs/sysfstest"
)

func TestBuildClaimsPCIeRoot(t *testing.T) {
	c, err := BuildClaims("hgx-h100", machine(t, sysfstest.HGXH100), ClaimOptions{Name: "two-gpus", Namespace: "team-a", GPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	spec := c.Template.Spec.Spec.Devices
	if c.Method != MethodPCIeRoot || len(spec.Requests) != 4 || len(spec.Constraints) != 2 {
		t.Fatalf("method %s, %d requests, %d constraints", c.Method, len(spec.Requests), len(spec.Constraints))
	}
	for i, con := range spec.Constraints {
		if con.MatchAttribute == nil || string(*con.MatchAttribute) != AttrPCIeRoot || len(con.Requests) != 2 {
			t.Errorf("constraint %d: %+v", i, con)
		}
	}
	if r := spec.Requests[0].Exactly; r.DeviceClassName != GPUClass || r.Count != 1 || r.DerivedAttributes != nil {
		t.Errorf("GPU request %+v", r)
	}
	if r := spec.Requests[1].Exactly; r.DeviceClassName != NICClass || r.Count != 1 {
		t.Errorf("NIC request %+v", r)
	}
}

// TestBuildClaimsDerived: on the half-NIC shape pcieRoot is not enough;
// the derived attribute, compiled and evaluated by the DRA library's CEL,
// puts each GPU with the NICs it is aligned with and with no other.
func TestBuildClaimsDerived(t *testing.T) {
	topo := machine(t, sysfstest.HalfNICs)
	if _, err := BuildClaims("half-nic", topo, ClaimOptions{Name: "x", GPUs: 1}); err == nil || !strings.Contains(err.Error(), "pcieRoot is not enough (12 of 16 same-root GPU-NIC pairs are past PXB)") {
		t.Fatalf("without --derived: %v", err)
	}
	c, err := BuildClaims("half-nic", topo, ClaimOptions{Name: "x", GPUs: 2, Derived: true})
	if err != nil {
		t.Fatal(err)
	}
	if c.Method != MethodDerived || len(c.Notes) == 0 || !strings.Contains(c.Notes[0], "DRADerivedAttributes") {
		t.Fatalf("method %s, notes %q", c.Method, c.Notes)
	}
	req := c.Template.Spec.Spec.Devices.Requests[0].Exactly
	if len(req.DerivedAttributes) != 1 || string(*c.Template.Spec.Spec.Devices.Constraints[0].MatchAttribute) != SwitchAttr {
		t.Fatalf("derived attribute not used: %+v", c.Template.Spec.Spec.Devices)
	}
	expr := req.DerivedAttributes[0].Expression
	compiled := cel.GetCompiler(cel.Features{}).CompileCELExpression(expr, cel.Options{DerivedAttribute: true})
	if compiled.Error != nil {
		t.Fatalf("the expression does not compile: %v\n%s", compiled.Error, expr)
	}
	group := func(driver, busID string) string {
		d := cel.Device{Driver: driver, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{}}
		if busID != "" {
			d.Attributes[AttrPCIBusID] = resourcev1.DeviceAttribute{StringValue: &busID}
		}
		v, _, err := compiled.EvaluateDerivedAttribute(context.Background(), d)
		if err != nil || v == nil || v.StringValue == nil {
			t.Fatalf("evaluating for %s %s: %v %v", driver, busID, v, err)
		}
		return *v.StringValue
	}
	m := topo.Matrix()
	ng := len(topo.GPUs)
	for i, g := range topo.GPUs {
		for j, n := range topo.NICs {
			aligned := m.Cells[i][ng+j].Level <= topology.LevelPXB
			same := group(GPUClass, g.PCI.Address) == group("dra.net", n.PCI.Address)
			if aligned != same {
				t.Errorf("GPU %s, NIC %s (%s): same group %v", g.PCI.Address, n.Name, m.Cells[i][ng+j].Level, same)
			}
		}
	}
	if a, b := group(GPUClass, ""), group("dra.net", ""); a == b {
		t.Errorf("devices without a bus ID from two drivers share %q", a)
	}
	if a, b := group(GPUClass, "0000:ff:00.0"), group("dra.net", "0000:fe:00.0"); a == b {
		t.Errorf("unknown devices share %q", a)
	}
}

func TestBuildClaimsBadInput(t *testing.T) {
	h100 := machine(t, sysfstest.HGXH100)
	noNIC := machine(t, func(tr *sysfstest.Tree) { tr.GPU("pci0000:00/0000:00:01.0/0000:01:00.0", 0, "0-7") })
	for _, tc := range []struct {
		name string
		topo *topology.Topology
		o    ClaimOptions
		want string
	}{
		{"no GPUs asked", h100, ClaimOptions{GPUs: 0}, "--gpus 0: want at least 1"},
		{"more GPUs than the machine", h100, ClaimOptions{GPUs: 9}, "9 GPUs: machine m has 8"},
		{"not a multiple", h100, ClaimOptions{GPUs: 3, GPUsPerNIC: 2}, "--gpus 3 is not a multiple of --gpus-per-nic 2"},
		{"no NIC", noNIC, ClaimOptions{GPUs: 1}, "machine m has no RDMA NIC"},
		{"larger than any switch", h100, ClaimOptions{GPUs: 2, GPUsPerNIC: 2}, "2 GPUs per NIC is larger than any switch of m: at most 1 GPUs share a NIC at PXB or closer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := BuildClaims("m", tc.topo, tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
