package exporter

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// PodView is what verification needs of a pod: its device-plugin devices
// from the kubelet, the PCI addresses of the devices its DRA claims hold,
// and its annotations from the apiserver.
type PodView struct {
	Namespace, Name string
	Devices         []devices.Device
	Claimed         []string
	Annotations     map[string]string
}

// Verdict is the outcome of verifying one pod.
type Verdict struct {
	Observed annotations.Observed
	// RDMA is false for pods that use no NIC: nothing to align.
	RDMA bool
	// Problems are device IDs that match nothing on this node.
	Problems []string
}

// Verifier computes, for the GPUs a pod really got, the nearest NIC it may use.
type Verifier struct {
	Node         string
	Topology     *topology.Topology
	Resources    nrt.Resources
	RDMAPrefixes []string
	// MaxLevel is the default worst acceptable level (PXB); the pod's
	// nicaffinity.io/max-level annotation overrides it.
	MaxLevel topology.Level

	devices *nrt.Devices
	matrix  *topology.Matrix
}

// NewVerifier prepares a verifier for one topology.
func NewVerifier(node string, t *topology.Topology, r nrt.Resources, rdmaPrefixes []string, maxLevel topology.Level) *Verifier {
	return &Verifier{Node: node, Topology: t, Resources: r, RDMAPrefixes: rdmaPrefixes, MaxLevel: maxLevel, devices: nrt.NewDevices(t), matrix: t.Matrix()}
}

func (v *Verifier) isRDMA(resource string) bool {
	if v.Resources.IsSRIOV(resource) {
		return true
	}
	for _, p := range v.RDMAPrefixes {
		if strings.HasPrefix(resource, p) {
			return true
		}
	}
	return false
}

// Verify looks at one pod. ok is false when the pod holds no GPU.
func (v *Verifier) Verify(p PodView) (Verdict, bool) {
	var out Verdict
	var gpus []int
	candidates := map[int]bool{}
	wantsRDMA := p.Annotations[annotations.RDMA] == "true"
	for _, d := range p.Devices {
		switch {
		case d.Resource == v.Resources.GPU:
			if i, ok := v.devices.GPU(d.ID); ok {
				gpus = append(gpus, i)
			} else {
				out.Problems = append(out.Problems, fmt.Sprintf("%s device %q is no GPU of this node", d.Resource, d.ID))
			}
		case v.Resources.IsSRIOV(d.Resource):
			wantsRDMA = true
			if pf, ok := v.devices.PFOfVF(d.ID); ok {
				candidates[pf] = true
			} else {
				out.Problems = append(out.Problems, fmt.Sprintf("%s device %q is no VF of this node", d.Resource, d.ID))
			}
		case v.isRDMA(d.Resource):
			wantsRDMA = true
		}
	}
	// Through DRA a pod holds exactly the NICs its claims name: PFs
	// (dranet) or VFs (dra-driver-sriov).
	for _, addr := range p.Claimed {
		if i, ok := v.devices.GPU(addr); ok {
			if !slices.Contains(gpus, i) {
				gpus = append(gpus, i)
			}
		} else if n, ok := v.devices.NIC(addr); ok {
			wantsRDMA, candidates[n] = true, true
		} else if pf, ok := v.devices.PFOfVF(addr); ok {
			wantsRDMA, candidates[pf] = true, true
		}
		// Other PCI devices (NVMe, accelerators of other kinds) are not
		// part of the alignment.
	}
	if len(gpus) == 0 {
		return out, false
	}
	sort.Ints(gpus)
	out.RDMA = wantsRDMA
	if wantsRDMA && len(candidates) == 0 {
		// Shared RDMA (rdma/hca) reaches every HCA of the pool: any NIC that is up.
		for i, n := range v.Topology.NICs {
			if n.PhysFn == "" && n.Up() {
				candidates[i] = true
			}
		}
	}
	maxLevel := v.MaxLevel
	if s, ok := p.Annotations[annotations.MaxLevel]; ok {
		if l, err := annotations.ParseMaxLevel(s); err == nil {
			maxLevel = l
		} else {
			out.Problems = append(out.Problems, err.Error())
		}
	}
	worst, worstUsable := topology.LevelX, topology.LevelX
	seenNIC := map[int]bool{}
	// usable is the level that counts for alignment: a path on which
	// GPUDirect RDMA cannot run is no better than PHB.
	usable := func(g, n int) (topology.Level, []string) {
		l := v.matrix.Cells[g][len(v.Topology.GPUs)+n].Level
		blocks := v.Topology.PathBlocks(g, n)
		if len(blocks) > 0 {
			l = max(l, topology.LevelPHB)
		}
		return l, blocks
	}
	for _, g := range gpus {
		gpu := v.Topology.GPUs[g]
		og := annotations.ObservedGPU{BusID: gpu.PCI.Address, UUID: gpu.UUID}
		if wantsRDMA {
			best, bestUsable := -1, topology.LevelSYS+1
			var blocks []string
			for n := range v.Topology.NICs {
				if !candidates[n] {
					continue
				}
				if l, why := usable(g, n); l < bestUsable || l == bestUsable && n < best {
					best, bestUsable, blocks = n, l, why
				}
			}
			if best >= 0 {
				level := v.matrix.Cells[g][len(v.Topology.GPUs)+best].Level
				og.NIC, og.Level = v.Topology.NICs[best].Name, level.String()
				if !seenNIC[best] {
					seenNIC[best] = true
					out.Observed.NICs = append(out.Observed.NICs, og.NIC)
				}
				for _, b := range blocks {
					if !slices.Contains(out.Observed.GPUDirect, b) {
						out.Observed.GPUDirect = append(out.Observed.GPUDirect, b)
					}
				}
				worst, worstUsable = max(worst, level), max(worstUsable, bestUsable)
			} else {
				worst, worstUsable = topology.LevelSYS+1, topology.LevelSYS+1 // no NIC at all
			}
		}
		out.Observed.GPUs = append(out.Observed.GPUs, og)
	}
	switch {
	case !wantsRDMA:
		out.Observed.Aligned = true
	case worst > topology.LevelSYS:
		out.Observed.Level = "none"
	default:
		out.Observed.Level = worst.String()
		out.Observed.Aligned = worstUsable <= maxLevel
	}
	out.Observed.Plan = v.comparePlan(p, out.Observed)
	return out, true
}

func (v *Verifier) comparePlan(p PodView, o annotations.Observed) string {
	s, ok := p.Annotations[annotations.AllocationKey]
	if !ok {
		return "none"
	}
	plan, err := annotations.ParseAllocation(s)
	if err != nil || plan.Node != v.Node {
		return "differs"
	}
	var got []string
	for _, g := range o.GPUs {
		got = append(got, g.BusID)
	}
	want := append([]string(nil), plan.GPUs...)
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		return "differs"
	}
	return "matched"
}

// Message is the event text for a verdict.
func (vd Verdict) Message() string {
	var parts []string
	for _, g := range vd.Observed.GPUs {
		if g.NIC != "" {
			parts = append(parts, fmt.Sprintf("%s-%s %s", g.BusID, g.NIC, g.Level))
		} else {
			parts = append(parts, g.BusID+" no NIC")
		}
	}
	verdict := "GPUDirect RDMA-capable"
	switch {
	case len(vd.Observed.GPUDirect) > 0 && vd.Observed.Aligned:
		verdict = "within the pod's max level, but GPUDirect RDMA impossible (" + strings.Join(vd.Observed.GPUDirect, "; ") + ")"
	case len(vd.Observed.GPUDirect) > 0:
		verdict = "not aligned: GPUDirect RDMA impossible (" + strings.Join(vd.Observed.GPUDirect, "; ") + "), NCCL will stage RDMA through host memory"
	case !vd.Observed.Aligned:
		verdict = "not aligned: NCCL will stage RDMA through host memory"
	}
	plan := map[string]string{"matched": "; the node followed the scheduler's plan", "differs": "; the node did not follow the scheduler's plan", "none": ""}[vd.Observed.Plan]
	return fmt.Sprintf("GPU-NIC %s (worst %s): %s%s", strings.Join(parts, ", "), vd.Observed.Level, verdict, plan)
}
