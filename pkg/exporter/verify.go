package exporter

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/request"
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
	// Pod is the pod object, read through pkg/request as the scheduler
	// reads it (its level, and whether it says it needs a NIC); nil reads
	// a pod of Annotations alone.
	Pod *corev1.Pod
}

// pod is the pod request reads.
func (p PodView) pod() *corev1.Pod {
	if p.Pod != nil {
		return p.Pod
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, Annotations: p.Annotations}}
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
	// align are the decision levels of every GPU-NIC pair (P2C where
	// NCCL's rule gives it).
	align [][]topology.Level
}

// NewVerifier prepares a verifier for one topology.
func NewVerifier(node string, t *topology.Topology, r nrt.Resources, rdmaPrefixes []string, maxLevel topology.Level) *Verifier {
	return &Verifier{Node: node, Topology: t, Resources: r, RDMAPrefixes: rdmaPrefixes, MaxLevel: maxLevel, devices: nrt.NewDevices(t), align: t.AlignLevels()}
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
	h := v.held(p)
	out := Verdict{Problems: h.problems}
	if len(h.gpus) == 0 {
		return out, false
	}
	out.RDMA = h.rdma
	if h.rdma && len(h.candidates) == 0 {
		v.sharedRDMA(h.candidates)
	}
	maxLevel, problem := v.podMaxLevel(p)
	if problem != "" {
		out.Problems = append(out.Problems, problem)
	}
	var worst, worstUsable topology.Level
	out.Observed, worst, worstUsable = v.observe(h)
	switch {
	case !h.rdma:
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

// holdings are the devices a pod holds, by position in the topology: its
// GPUs (sorted), the NICs its VFs or claims name (candidates), whether it
// needs a NIC at all, and what could not be matched.
type holdings struct {
	gpus       []int
	candidates map[int]bool
	rdma       bool
	problems   []string
}

// held reads a pod's devices (device plugin resources, then DRA claims).
func (v *Verifier) held(p PodView) holdings {
	h := holdings{candidates: map[int]bool{}, rdma: request.RDMAAnnotated(p.pod())}
	for _, d := range p.Devices {
		switch {
		case d.Resource == v.Resources.GPU:
			if i, ok := v.devices.GPU(d.ID); ok {
				h.gpus = append(h.gpus, i)
			} else {
				h.problems = append(h.problems, fmt.Sprintf("%s device %q is no GPU of this node", d.Resource, d.ID))
			}
		case v.Resources.IsSRIOV(d.Resource):
			h.rdma = true
			if pf, ok := v.devices.PFOfVF(d.ID); ok {
				h.candidates[pf] = true
			} else {
				h.problems = append(h.problems, fmt.Sprintf("%s device %q is no VF of this node", d.Resource, d.ID))
			}
		case v.isRDMA(d.Resource):
			h.rdma = true
		}
	}
	// Through DRA a pod holds exactly the NICs its claims name: PFs
	// (dranet) or VFs (dra-driver-sriov).
	for _, addr := range p.Claimed {
		if i, ok := v.devices.GPU(addr); ok {
			if !slices.Contains(h.gpus, i) {
				h.gpus = append(h.gpus, i)
			}
		} else if n, ok := v.devices.NIC(addr); ok {
			h.rdma, h.candidates[n] = true, true
		} else if pf, ok := v.devices.PFOfVF(addr); ok {
			h.rdma, h.candidates[pf] = true, true
		}
		// Other PCI devices (NVMe, accelerators of other kinds) are not
		// part of the alignment.
	}
	sort.Ints(h.gpus)
	return h
}

// sharedRDMA fills the candidates of a pod whose RDMA is shared (rdma/hca
// reaches every HCA of the pool): every NIC that is up.
func (v *Verifier) sharedRDMA(candidates map[int]bool) {
	for i, n := range v.Topology.NICs {
		if n.PhysFn == "" && n.Up() {
			candidates[i] = true
		}
	}
}

// podMaxLevel is the level the pod accepts (request.MaxLevelOf, as the
// scheduler reads it), and the problem with its annotation if it has a bad
// one (the default applies then).
func (v *Verifier) podMaxLevel(p PodView) (topology.Level, string) {
	l, _, err := request.MaxLevelOf(p.pod(), v.MaxLevel)
	if err != nil {
		return l, err.Error()
	}
	return l, ""
}

// observe finds, for each GPU the pod holds, its nearest usable NIC among
// the candidates: the observed GPUs and NICs, the GPUDirect blocks on the
// paths, and the worst level and worst usable level (past SYS: no NIC).
func (v *Verifier) observe(h holdings) (o annotations.Observed, worst, worstUsable topology.Level) {
	worst, worstUsable = topology.LevelX, topology.LevelX
	seenNIC := map[int]bool{}
	// usable is the level that counts for alignment: a path on which
	// GPUDirect RDMA cannot run is no better than PHB.
	usable := func(g, n int) (topology.Level, []string) {
		l := v.align[g][n]
		blocks := v.Topology.PathBlocks(g, n)
		if len(blocks) > 0 {
			l = max(l, topology.LevelPHB)
		}
		return l, blocks
	}
	for _, g := range h.gpus {
		gpu := v.Topology.GPUs[g]
		og := annotations.ObservedGPU{BusID: gpu.PCI.Address, UUID: gpu.UUID}
		if h.rdma {
			best, bestUsable := -1, topology.LevelSYS+1
			var blocks []string
			for n := range v.Topology.NICs {
				if !h.candidates[n] {
					continue
				}
				if l, why := usable(g, n); l < bestUsable || l == bestUsable && n < best {
					best, bestUsable, blocks = n, l, why
				}
			}
			if best >= 0 {
				level := v.align[g][best]
				og.NIC, og.Level = v.Topology.NICs[best].Name, level.String()
				if !seenNIC[best] {
					seenNIC[best] = true
					o.NICs = append(o.NICs, og.NIC)
				}
				for _, b := range blocks {
					if !slices.Contains(o.GPUDirect, b) {
						o.GPUDirect = append(o.GPUDirect, b)
					}
				}
				worst, worstUsable = max(worst, level), max(worstUsable, bestUsable)
			} else {
				worst, worstUsable = topology.LevelSYS+1, topology.LevelSYS+1 // no NIC at all
			}
		}
		o.GPUs = append(o.GPUs, og)
	}
	return o, worst, worstUsable
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
