package sim

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// TimeModel turns a job's aligned runtime (its duration with GPUDirect RDMA
// on every GPU) into its runtime on the GPUs and NICs it really got. A job
// that uses a NIC spends CommShare of its aligned runtime communicating
// between nodes; that part runs at the bandwidth its worst GPU-NIC level
// allows, relative to GPUDirect RDMA:
//
//	runtime = aligned x ((1 - c) + c / (Bandwidth[worst level] x r))
//
// where r is CrossRail for a multi-pod job whose pods are on different
// rails (its traffic crosses the spine) and 1 otherwise. A job without a
// NIC runs its aligned runtime. The defaults and their sources are in
// docs/simulate.md ("The job-time model").
type TimeModel struct {
	// CommShare is, per job size in GPUs, the share of an aligned run spent
	// in inter-node communication, in [0, 1).
	CommShare map[int]float64 `yaml:"commShare" json:"commShare"`
	// Bandwidth is, per GPU-NIC level (PIX, PXB, PHB, NODE, SYS), the
	// network bandwidth a job gets relative to GPUDirect RDMA, in (0, 1].
	Bandwidth map[string]float64 `yaml:"bandwidth" json:"bandwidth"`
	// CrossRail is the bandwidth, relative to staying on one rail, of a
	// multi-pod job whose pods use different rails, in (0, 1].
	CrossRail *float64 `yaml:"crossRail" json:"crossRail"`
}

// crossRail is the model's CrossRail, 1 when unset.
func (m TimeModel) crossRail() float64 {
	if m.CrossRail == nil {
		return 1
	}
	return *m.CrossRail
}

// DefaultTimeModel: a third of an aligned run communicates, whatever the
// size (an assumption to set per workload, not a measurement); NCCL uses
// GPUDirect RDMA up to PXB (NCCL_NET_GDR_LEVEL's default) and, without it,
// stages through host memory at about half the bandwidth (NCCL issue 465:
// 6 GB/s of bus bandwidth on 100 Gb/s InfiniBand without GPUDirect, half of
// what the link gives with it). No published figure separates PHB, NODE
// and SYS, so they share the factor.
//
// CrossRail, 0.5, is an assumption too: a job split across rails sends its
// inter-node traffic through the spine, which in a rail-optimized fabric
// is commonly built with less bandwidth than the rails below it; 0.5 is a
// 2:1 oversubscribed spine (1 on a non-blocking one). Set it from your
// fabric.
var DefaultTimeModel = TimeModel{
	CommShare: map[int]float64{1: 0.3, 2: 0.3, 3: 0.3, 4: 0.3, 5: 0.3, 6: 0.3, 7: 0.3, 8: 0.3},
	Bandwidth: map[string]float64{"PIX": 1, "PXB": 1, "P2C": 1, "PHB": 0.5, "NODE": 0.5, "SYS": 0.5},
	CrossRail: ptrTo(0.5),
}

func ptrTo[T any](v T) *T { return &v }

// Runtime is how long a job of gpus GPUs whose aligned runtime is aligned
// runs when its worst GPU-NIC level is worst; rdma is whether it uses a NIC
// at all. The model has been validated (validate), so every size and level
// has its factor.
func (m TimeModel) Runtime(aligned time.Duration, gpus int, rdma bool, worst topology.Level) time.Duration {
	return m.RuntimeOnRails(aligned, gpus, rdma, worst, false)
}

// RuntimeOnRails is Runtime for a job whose pods are on different rails
// when split is true.
func (m TimeModel) RuntimeOnRails(aligned time.Duration, gpus int, rdma bool, worst topology.Level, split bool) time.Duration {
	if !rdma {
		return aligned
	}
	c := m.CommShare[gpus]
	b, ok := m.Bandwidth[worst.String()]
	if !ok && worst == topology.LevelP2C {
		b = 1 // optional in a spec: NCCL's default uses GPUDirect RDMA on P2C
	}
	if b <= 0 {
		b = 1 // a level outside the model (X, NV): not a NIC path
	}
	if split {
		b *= m.crossRail()
	}
	return time.Duration(float64(aligned) * ((1 - c) + c/b)).Round(time.Millisecond)
}

// validate checks the model against the job sizes the workload draws;
// path locates an error in the spec.
func (m TimeModel) validate(sizes map[int]int, bad func(msg string, path ...any) error) error {
	for _, k := range slices.Sorted(maps.Keys(m.CommShare)) {
		c := m.CommShare[k]
		if k < 1 || k > 8 {
			return bad(fmt.Sprintf("%d GPUs: want 1 to 8", k), "timeModel", "commShare", strconv.Itoa(k))
		}
		if !(c >= 0 && c < 1) { // also NaN
			return bad(fmt.Sprintf("%g: want a share in [0, 1)", c), "timeModel", "commShare", strconv.Itoa(k))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(sizes)) {
		if _, ok := m.CommShare[k]; !ok && sizes[k] > 0 {
			return bad(fmt.Sprintf("no share for %d-GPU jobs, which sizes draws", k), "timeModel", "commShare")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(m.Bandwidth)) {
		l, err := topology.ParseLevel(name)
		if err != nil || !slices.Contains(topology.Levels, l) || l.String() != name {
			return bad(fmt.Sprintf("%q: want PIX, PXB, P2C, PHB, NODE or SYS", name), "timeModel", "bandwidth", name)
		}
		if b := m.Bandwidth[name]; !(b > 0 && b <= 1) {
			return bad(fmt.Sprintf("%g: want a bandwidth relative to GPUDirect RDMA in (0, 1]", b), "timeModel", "bandwidth", name)
		}
	}
	for _, l := range topology.Levels {
		if _, ok := m.Bandwidth[l.String()]; !ok && l != topology.LevelP2C {
			return bad(fmt.Sprintf("no factor for %s", l), "timeModel", "bandwidth")
		}
	}
	if r := m.crossRail(); !(r > 0 && r <= 1) {
		return bad(fmt.Sprintf("%g: want a bandwidth relative to one rail in (0, 1]", r), "timeModel", "crossRail")
	}
	return nil
}
