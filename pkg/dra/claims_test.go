package dra

import (
	"context"
	"strings"
	"testing"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"

	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

func TestBuildClaimsPCIeRoot(t *testing.T) {
	c, err := BuildClaims("hgx-h100", machine(t, machines.HGXH100), ClaimOptions{Name: "two-gpus", Namespace: "team-a", GPUs: 2})
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
	topo := machine(t, machines.HalfNICs)
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
	group := evaluator(t, req.DerivedAttributes[0].Expression)
	checkGroups(t, "half-nic", topo, group, true)
	if a, b := group(GPUClass, ""), group("dra.net", ""); a == b {
		t.Errorf("devices without a bus ID from two drivers share %q", a)
	}
	if a, b := group(GPUClass, "0000:ff:00.0"), group("dra.net", "0000:fe:00.0"); a == b {
		t.Errorf("unknown devices share %q", a)
	}
}

func TestBuildClaimsBadInput(t *testing.T) {
	h100 := machine(t, machines.HGXH100)
	noNIC := machine(t, func(tr *machines.Tree) { tr.GPU("pci0000:00/0000:00:01.0/0000:01:00.0", 0, "0-7") })
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

// evaluator compiles a derived attribute with the DRA library's CEL (the
// scheduler's own) and returns it as a function of a device's driver, bus
// ID and pcieRoot (empty: the device does not publish it).
func evaluator(t *testing.T, expr string) func(driver, busID string, root ...string) string {
	t.Helper()
	compiled := cel.GetCompiler(cel.Features{}).CompileCELExpression(expr, cel.Options{DerivedAttribute: true})
	if compiled.Error != nil {
		t.Fatalf("the expression does not compile: %v\n%s", compiled.Error, expr)
	}
	return func(driver, busID string, root ...string) string {
		d := cel.Device{Driver: driver, Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{}}
		if busID != "" {
			d.Attributes[AttrPCIBusID] = resourcev1.DeviceAttribute{StringValue: &busID}
		}
		if len(root) > 0 && root[0] != "" {
			d.Attributes[AttrPCIeRoot] = resourcev1.DeviceAttribute{StringValue: &root[0]}
		}
		v, _, err := compiled.EvaluateDerivedAttribute(context.Background(), d)
		if err != nil || v == nil || v.StringValue == nil {
			t.Fatalf("evaluating for %s %s: %v %v", driver, busID, v, err)
		}
		return *v.StringValue
	}
}

// checkGroups: on topo, two devices share a derived value only when they
// are aligned, and (exact) every aligned pair shares one; otherwise every
// GPU with an aligned NIC shares a value with one of them.
func checkGroups(t *testing.T, name string, topo *topology.Topology, group func(driver, busID string, root ...string) string, exact bool) {
	t.Helper()
	m := topo.Matrix()
	ng := len(topo.GPUs)
	for i, g := range topo.GPUs {
		hasAligned, paired := false, false
		for j, n := range topo.NICs {
			if n.PhysFn != "" {
				continue
			}
			aligned := m.Cells[i][ng+j].Level <= topology.LevelPXB
			same := group(GPUClass, g.PCI.Address, g.PCI.RootComplex) == group("dra.net", n.PCI.Address, n.PCI.RootComplex)
			hasAligned, paired = hasAligned || aligned, paired || same
			if same && !aligned || exact && aligned && !same {
				t.Errorf("%s: GPU %s, NIC %s (%s): same group %v", name, g.PCI.Address, n.Name, m.Cells[i][ng+j].Level, same)
			}
		}
		if hasAligned && !paired {
			t.Errorf("%s: GPU %s has an aligned NIC but no NIC shares its group", name, g.PCI.Address)
		}
	}
}

// mixedMachines are the HGX H100, DGX A100, H20 and half-NIC shapes.
func mixedMachines(t *testing.T) []Machine {
	var ms []Machine
	for _, b := range []struct {
		name  string
		build func(*machines.Tree)
	}{{"hgx-h100", machines.HGXH100}, {"dgx-a100", machines.DGXA100}, {"h20", machines.H20SRIOV}, {"half-nic", machines.HalfNICs}} {
		ms = append(ms, Machine{Name: b.name, Topology: machine(t, b.build)})
	}
	return ms
}

// TestBuildClaimsMixed: one template for a cluster of four shapes: the
// half-NIC shape needs a derived attribute, the others keep their
// pcieRoot, and on every machine the scheduler's CEL groups only aligned
// GPU-NIC pairs and loses none.
func TestBuildClaimsMixed(t *testing.T) {
	ms := mixedMachines(t)
	if _, err := BuildClaimsFor(ms, ClaimOptions{GPUs: 1}); err == nil || !strings.Contains(err.Error(), "on half-nic pcieRoot is not enough") {
		t.Fatalf("without Derived: %v", err)
	}
	c, err := BuildClaimsFor(ms, ClaimOptions{GPUs: 2, Derived: true})
	if err != nil {
		t.Fatal(err)
	}
	if c.Method != MethodDerived {
		t.Fatalf("method %s", c.Method)
	}
	group := evaluator(t, c.Template.Spec.Spec.Devices.Requests[0].Exactly.DerivedAttributes[0].Expression)
	for _, m := range ms {
		checkGroups(t, m.Name, m.Topology, group, false)
	}
	// Four GPUs, each with its own NIC: the half-NIC shape's two NICs are
	// too few, which the template notes; on that shape alone it is an error.
	c, err = BuildClaimsFor(ms, ClaimOptions{GPUs: 4, Derived: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Join(c.Notes, "\n"); !strings.Contains(n, "cannot run on every machine: 4 groups of 1 GPUs, each with its own aligned NIC: half-nic has room for 2") {
		t.Errorf("notes do not say the half-NIC shape is too small:\n%s", n)
	}
	if _, err := BuildClaimsFor(ms[3:], ClaimOptions{GPUs: 4, Derived: true}); err == nil || !strings.Contains(err.Error(), "half-nic has room for 2") {
		t.Errorf("four NICs on the half-NIC shape: %v", err)
	}
	if _, err := BuildClaimsFor(nil, ClaimOptions{GPUs: 1}); err == nil {
		t.Error("no machine: no error")
	}
}

// TestBuildClaimsShared: with shared NICs the template selects, with the
// scheduler's own CEL, exactly the GPUs that have an aligned NIC on every
// machine of a mixed cluster, and takes every NIC; no constraint, no
// derived attribute.
func TestBuildClaimsShared(t *testing.T) {
	ms := mixedMachines(t)
	c, err := BuildClaimsFor(ms, ClaimOptions{GPUs: 4, SharedNICs: true})
	if err != nil {
		t.Fatal(err)
	}
	devs := c.Template.Spec.Spec.Devices
	if c.Method != MethodSelector || len(devs.Requests) != 2 || len(devs.Constraints) != 0 {
		t.Fatalf("method %s, %+v", c.Method, devs)
	}
	gpus, nics := devs.Requests[0].Exactly, devs.Requests[1].Exactly
	if gpus.Count != 4 || len(gpus.Selectors) != 1 || gpus.DerivedAttributes != nil || nics.AllocationMode != resourcev1.DeviceAllocationModeAll || nics.DeviceClassName != NICClass {
		t.Fatalf("requests %+v, %+v", gpus, nics)
	}
	sel := checkSelector(t, ms, gpus.Selectors[0].CEL.Expression, true)
	if ok, _, err := sel.DeviceMatches(context.Background(), cel.Device{Driver: "gpu.nvidia.com"}); ok || err != nil {
		t.Errorf("a GPU without bus ID or root: selected %v (%v)", ok, err)
	}
	c, err = BuildClaimsFor(ms, ClaimOptions{GPUs: 8, SharedNICs: true})
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Join(c.Notes, "\n"); !strings.Contains(n, "cannot run on every machine: 8 GPUs, each with an aligned NIC: half-nic has 4 such GPUs") {
		t.Errorf("notes:\n%s", n)
	}
	if _, err := BuildClaimsFor(ms[3:], ClaimOptions{GPUs: 6, SharedNICs: true}); err == nil || err.Error() != "6 GPUs, each with an aligned NIC: half-nic has 4 such GPUs" {
		t.Errorf("six GPUs on the half-NIC shape: %v", err)
	}
}

// TestBuildClaimsNoNIC: a claim for GPUs alone prefers, with the
// scheduler's CEL, exactly the GPUs that have no aligned NIC, and falls
// back to any; on a machine without NICs it is a plain count.
func TestBuildClaimsNoNIC(t *testing.T) {
	ms := mixedMachines(t)
	c, err := BuildClaimsFor(ms, ClaimOptions{GPUs: 2, NoNIC: true})
	if err != nil {
		t.Fatal(err)
	}
	reqs := c.Template.Spec.Spec.Devices.Requests
	if len(reqs) != 1 || reqs[0].Exactly != nil || len(reqs[0].FirstAvailable) != 2 {
		t.Fatalf("requests %+v", reqs)
	}
	apart, anyGPU := reqs[0].FirstAvailable[0], reqs[0].FirstAvailable[1]
	if apart.Count != 2 || anyGPU.Count != 2 || len(anyGPU.Selectors) != 0 || len(apart.Selectors) != 1 {
		t.Fatalf("subrequests %+v, %+v", apart, anyGPU)
	}
	checkSelector(t, ms, apart.Selectors[0].CEL.Expression, false)
	noNIC := machine(t, func(tr *machines.Tree) { tr.GPU("pci0000:00/0000:00:01.0/0000:01:00.0", 0, "0-7") })
	c, err = BuildClaims("m", noNIC, ClaimOptions{GPUs: 1, NoNIC: true})
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Template.Spec.Spec.Devices.Requests; len(r) != 1 || r[0].Exactly == nil || r[0].Exactly.Count != 1 || len(r[0].Exactly.Selectors) != 0 {
		t.Errorf("on a machine without NICs: %+v", r)
	}
	if _, err := BuildClaims("m", noNIC, ClaimOptions{GPUs: 2, NoNIC: true}); err == nil || err.Error() != "2 GPUs: machine m has 1" {
		t.Errorf("two GPUs of one: %v", err)
	}
}

// checkSelector compiles a GPU selector with the scheduler's CEL and checks
// that on every machine it admits exactly the GPUs with a NIC at PXB or
// closer (aligned), or exactly the others.
func checkSelector(t *testing.T, ms []Machine, expr string, aligned bool) cel.CompilationResult {
	t.Helper()
	sel := cel.GetCompiler(cel.Features{}).CompileCELExpression(expr, cel.Options{})
	if sel.Error != nil {
		t.Fatalf("selector does not compile: %v", sel.Error)
	}
	for _, m := range ms {
		mx := m.Topology.Matrix()
		for i, g := range m.Topology.GPUs {
			near := false
			for j, n := range m.Topology.NICs {
				near = near || n.PhysFn == "" && mx.Cells[i][len(m.Topology.GPUs)+j].Level <= topology.LevelPXB
			}
			d := cel.Device{Driver: "gpu.nvidia.com", Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
				AttrPCIBusID: {StringValue: &g.PCI.Address}, AttrPCIeRoot: {StringValue: &g.PCI.RootComplex}}}
			if got, _, err := sel.DeviceMatches(context.Background(), d); err != nil || got != (near == aligned) {
				t.Errorf("%s GPU %s (next to a NIC: %v): selected %v (%v)", m.Name, g.PCI.Address, near, got, err)
			}
		}
	}
	return sel
}
