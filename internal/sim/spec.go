package sim

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/nicaffinity/nicaffinity/internal/cluster"
	"github.com/nicaffinity/nicaffinity/internal/kubeletsim"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/profiles"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
	"github.com/nicaffinity/nicaffinity/pkg/topology/discovery"
	"github.com/nicaffinity/nicaffinity/pkg/topology/ncclxml"
)

// ClusterSpec is the cluster: pools of identical nodes.
type ClusterSpec struct {
	Pools []Pool `yaml:"pools" json:"pools"`
}

// Pool is Count nodes of one machine, given by exactly one of:
// Machine, a bundled shape (a sysfs fixture of a published matrix, or
// "profile/<name>" for a bundled NCCL XML); NCCLXML, the path of the user's
// own NCCL topology dump; Sysfs, the root of a copy of a node's /sys
// (scripts/snapshot-sysfs.sh). Paths are relative to the spec file.
type Pool struct {
	Name    string `yaml:"name" json:"name"`
	Count   int    `yaml:"count" json:"count"`
	Machine string `yaml:"machine,omitempty" json:"machine,omitempty"`
	NCCLXML string `yaml:"ncclXML,omitempty" json:"ncclXML,omitempty"`
	Sysfs   string `yaml:"sysfs,omitempty" json:"sysfs,omitempty"`
}

// WorkloadSpec is the jobs to replay. Each job is one pod.
type WorkloadSpec struct {
	Jobs int `yaml:"jobs" json:"jobs"`
	// Sizes weighs job sizes in GPUs (1: 4 means four parts in the draw).
	Sizes map[int]int `yaml:"sizes" json:"sizes"`
	// RDMAShare of jobs need a NIC; VFShare of those take an SR-IOV VF
	// instead of the shared rdma/hca resource.
	RDMAShare float64 `yaml:"rdmaShare" json:"rdmaShare"`
	VFShare   float64 `yaml:"vfShare" json:"vfShare"`
	// Load is the offered GPU load (GPU-seconds asked per second, over the
	// cluster's GPUs) that arrivals follow, rising from From to To over the
	// submissions. Interarrival, when set, replaces it with a fixed gap.
	Load         Load     `yaml:"load" json:"load"`
	Interarrival Duration `yaml:"interarrival,omitempty" json:"interarrival,omitempty"`
	// A job's aligned runtime (with GPUDirect RDMA on every GPU) is drawn
	// between MinDuration and MaxDuration; TimeModel turns it into the
	// runtime on what the job got. One not Running MaxWait after submission
	// is given up.
	MinDuration Duration  `yaml:"minDuration" json:"minDuration"`
	MaxDuration Duration  `yaml:"maxDuration" json:"maxDuration"`
	MaxWait     Duration  `yaml:"maxWait" json:"maxWait"`
	TimeModel   TimeModel `yaml:"timeModel" json:"timeModel"`
	// TimeScale compresses time: the replay runs TimeScale times faster
	// than the workload's clock. Every duration in the spec, and every
	// figure of the report but the scheduler's latencies, is workload time.
	TimeScale float64 `yaml:"timeScale" json:"timeScale"`
	Seed      int64   `yaml:"seed" json:"seed"`
}

// replay is a workload duration on the replay's clock.
func (w WorkloadSpec) replay(d time.Duration) time.Duration {
	return time.Duration(float64(d) / w.TimeScale)
}

// Load is a linear ramp of offered GPU load.
type Load struct {
	From float64 `yaml:"from" json:"from"`
	To   float64 `yaml:"to" json:"to"`
}

// Duration reads "4s" style durations in specs and prints them back so.
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (like 250ms, 4s, 1m)", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalText prints the duration as Go writes it.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// Std is the time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// Defaults: real shapes. HGX H100 (every GPU PIX to a NIC), DGX A100 (two
// GPUs per NIC at PXB), Azure NDv2 (8 V100, one NIC for all: no GPUDirect
// anywhere), the half-NIC shape (switches without a NIC), and an H20 with
// SR-IOV VFs on two of its NICs. The load rises to 90% of the GPUs. Jobs
// run 15 to 60 minutes, replayed 2400 times faster (0.375 to 1.5 s): the
// scheduler, kubelets and exporters take milliseconds per pod, which the
// compression turns into seconds of workload time, small next to jobs.
var (
	DefaultCluster = ClusterSpec{Pools: []Pool{
		{Name: "h100", Count: 2, Machine: "hgx-h100-8gpu-8nic"},
		{Name: "a100", Count: 1, Machine: "dgx-a100-8gpu-10nic"},
		{Name: "ndv2", Count: 1, Machine: "profile/azure-ndv2-v100-8gpu"},
		{Name: "half", Count: 2, Machine: "half-nic-8gpu-2nic"},
		{Name: "h20", Count: 1, Machine: "h20-3e-8gpu-11nic-sriov"},
	}}
	DefaultWorkload = WorkloadSpec{Jobs: 64, Sizes: map[int]int{1: 4, 2: 3, 4: 2, 8: 1}, RDMAShare: 0.7, VFShare: 0.1,
		Load: Load{From: 0.3, To: 0.9}, MinDuration: Duration(15 * time.Minute), MaxDuration: Duration(60 * time.Minute),
		MaxWait: Duration(3 * time.Hour), TimeModel: DefaultTimeModel, TimeScale: 2400, Seed: 1}
)

// Scenario is a bundled cluster and workload.
type Scenario struct {
	Cluster  ClusterSpec
	Workload WorkloadSpec
	// Parallel is how many replays run at a time on two cores without the
	// control planes falling behind (the report's submit lag says).
	Parallel int
}

// Scenarios are the bundled ones: "default" (make demo) and "large", 64
// nodes of the same shapes in about the same proportions and 1000 jobs,
// replayed at a gentler compression (150x: 6 to 24 s a job) so that one
// control plane with 64 exporters and kubelets keeps up on a core: at 900x
// bindings lagged seconds behind and most jobs were given up.
var Scenarios = map[string]Scenario{
	"default": {Cluster: DefaultCluster, Workload: DefaultWorkload, Parallel: 2},
	"large":   {Cluster: LargeCluster, Workload: LargeWorkload, Parallel: 2},
}

var (
	LargeCluster = ClusterSpec{Pools: []Pool{
		{Name: "h100", Count: 20, Machine: "hgx-h100-8gpu-8nic"},
		{Name: "a100", Count: 10, Machine: "dgx-a100-8gpu-10nic"},
		{Name: "ndv2", Count: 8, Machine: "profile/azure-ndv2-v100-8gpu"},
		{Name: "half", Count: 18, Machine: "half-nic-8gpu-2nic"},
		{Name: "h20", Count: 8, Machine: "h20-3e-8gpu-11nic-sriov"},
	}}
	LargeWorkload = func() WorkloadSpec {
		w := DefaultWorkload
		w.Jobs, w.TimeScale = 1000, 150
		return w
	}()
)

// SpecError is a spec problem at a line of a file.
type SpecError struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (e *SpecError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, ": %s", e.Field)
	}
	fmt.Fprintf(&b, ": %s", e.Msg)
	return b.String()
}

// decodeStrict decodes one YAML document into out, refusing unknown fields,
// and returns the node tree so that later checks can name lines.
// Caps on specs: a simulation runs every node and job in this process, so
// a spec past these would exhaust the machine long before it finished.
const (
	maxSpecBytes    = 1 << 20
	maxPoolNodes    = 1000
	maxClusterNodes = 2000
	maxPools        = 100
	maxJobs         = 100_000
	maxDuration     = 7 * 24 * time.Hour
	maxTimeScale    = 100_000
	// A replayed job shorter than this would measure the control plane's
	// latency, not the placement.
	minReplayDuration = 100 * time.Millisecond
)

func decodeStrict(file string, b []byte, out any) (*yaml.Node, error) {
	if len(b) > maxSpecBytes {
		return nil, &SpecError{File: file, Msg: fmt.Sprintf("%d bytes: a spec may have at most %d", len(b), maxSpecBytes)}
	}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, &SpecError{File: file, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	if len(root.Content) == 0 {
		return nil, &SpecError{File: file, Msg: "empty"}
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(out); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			// "line 3: field gpus not found in type sim.Pool": the Go type
			// means nothing to the user.
			msgs := make([]string, len(te.Errors))
			for i, m := range te.Errors {
				if k := strings.Index(m, " in type "); k > 0 {
					m = m[:k]
				}
				msgs[i] = m
			}
			return nil, &SpecError{File: file, Msg: strings.Join(msgs, "; ")}
		}
		return nil, &SpecError{File: file, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	return &root, nil
}

// lineOf is the line of the node at path (map keys and sequence indices)
// or of the deepest part of it that exists.
func lineOf(root *yaml.Node, path ...any) int {
	n := root
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := n.Line
	for _, p := range path {
		var next *yaml.Node
		switch k := p.(type) {
		case string:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == k {
						next = n.Content[i+1]
						line = n.Content[i].Line
					}
				}
			}
		case int:
			if n.Kind == yaml.SequenceNode && k < len(n.Content) {
				next = n.Content[k]
				line = next.Line
			}
		}
		if next == nil {
			return line
		}
		n = next
	}
	return line
}

// ParseCluster reads a cluster spec; file names it in errors and is where
// relative paths start.
func ParseCluster(file string, b []byte) (ClusterSpec, error) {
	var c ClusterSpec
	root, err := decodeStrict(file, b, &c)
	if err != nil {
		return c, err
	}
	bad := func(i int, field, format string, args ...any) error {
		return &SpecError{File: file, Line: lineOf(root, "pools", i, field), Field: fmt.Sprintf("pools[%d].%s", i, field), Msg: fmt.Sprintf(format, args...)}
	}
	if len(c.Pools) == 0 {
		return c, &SpecError{File: file, Line: lineOf(root, "pools"), Field: "pools", Msg: "no pools: want at least one {name, count, machine}"}
	}
	if len(c.Pools) > maxPools {
		return c, &SpecError{File: file, Line: lineOf(root, "pools"), Field: "pools", Msg: fmt.Sprintf("%d pools: at most %d", len(c.Pools), maxPools)}
	}
	names := map[string]bool{}
	total := 0
	for i := range c.Pools {
		p := &c.Pools[i]
		switch {
		case p.Name == "":
			return c, bad(i, "name", "missing")
		case names[p.Name]:
			return c, bad(i, "name", "%q names two pools", p.Name)
		case p.Count <= 0:
			return c, bad(i, "count", "%d: want a positive number of nodes", p.Count)
		case p.Count > maxPoolNodes:
			return c, bad(i, "count", "%d: at most %d nodes a pool", p.Count, maxPoolNodes)
		}
		if total += p.Count; total > maxClusterNodes {
			return c, bad(i, "count", "the cluster passes %d nodes", maxClusterNodes)
		}
		names[p.Name] = true
		set := 0
		for _, s := range []string{p.Machine, p.NCCLXML, p.Sysfs} {
			if s != "" {
				set++
			}
		}
		if set != 1 {
			return c, bad(i, "machine", "want exactly one of machine, ncclXML, sysfs")
		}
		dir := filepath.Dir(file)
		for _, path := range []*string{&p.NCCLXML, &p.Sysfs} {
			if *path != "" && !filepath.IsAbs(*path) {
				*path = filepath.Join(dir, *path)
			}
		}
		field := "machine"
		switch {
		case p.NCCLXML != "":
			field = "ncclXML"
		case p.Sysfs != "":
			field = "sysfs"
		}
		if _, err := p.node(); err != nil {
			return c, bad(i, field, "%v", err)
		}
	}
	return c, nil
}

// ParseWorkload reads a workload spec over the defaults.
func ParseWorkload(file string, b []byte) (WorkloadSpec, error) {
	w := DefaultWorkload
	// A map would merge with the default's, not replace it.
	w.Sizes, w.TimeModel = nil, TimeModel{}
	root, err := decodeStrict(file, b, &w)
	if err != nil {
		return w, err
	}
	if w.Sizes == nil {
		w.Sizes = DefaultWorkload.Sizes
	}
	if w.TimeModel.CommShare == nil {
		w.TimeModel.CommShare = DefaultTimeModel.CommShare
	}
	if w.TimeModel.Bandwidth == nil {
		w.TimeModel.Bandwidth = DefaultTimeModel.Bandwidth
	}
	bad := func(msg string, path ...any) error {
		var field []string
		for _, p := range path {
			field = append(field, fmt.Sprint(p))
		}
		return &SpecError{File: file, Line: lineOf(root, path...), Field: strings.Join(field, "."), Msg: msg}
	}
	switch {
	case w.Jobs <= 0:
		return w, bad(fmt.Sprintf("%d: want a positive number of jobs", w.Jobs), "jobs")
	case w.Jobs > maxJobs:
		return w, bad(fmt.Sprintf("%d: at most %d jobs", w.Jobs, maxJobs), "jobs")
	case w.MaxDuration.Std() > maxDuration:
		return w, bad(fmt.Sprintf("%s: at most %s", w.MaxDuration.Std(), maxDuration), "maxDuration")
	case w.MaxWait.Std() > maxDuration:
		return w, bad(fmt.Sprintf("%s: at most %s", w.MaxWait.Std(), maxDuration), "maxWait")
	case w.Interarrival.Std() > maxDuration:
		return w, bad(fmt.Sprintf("%s: at most %s", w.Interarrival.Std(), maxDuration), "interarrival")
	case w.RDMAShare < 0 || w.RDMAShare > 1:
		return w, bad(fmt.Sprintf("%g: want a share in [0, 1]", w.RDMAShare), "rdmaShare")
	case w.VFShare < 0 || w.VFShare > 1:
		return w, bad(fmt.Sprintf("%g: want a share of the RDMA jobs in [0, 1]", w.VFShare), "vfShare")
	case w.Interarrival < 0:
		return w, bad("negative", "interarrival")
	case w.Interarrival == 0 && (w.Load.From <= 0 || w.Load.From > 1):
		return w, bad(fmt.Sprintf("%g: want a GPU load in (0, 1]", w.Load.From), "load", "from")
	case w.Interarrival == 0 && (w.Load.To <= 0 || w.Load.To > 1):
		return w, bad(fmt.Sprintf("%g: want a GPU load in (0, 1]", w.Load.To), "load", "to")
	case w.MinDuration <= 0:
		return w, bad("want a positive duration", "minDuration")
	case w.MaxDuration < w.MinDuration:
		return w, bad(fmt.Sprintf("%s is less than minDuration %s", w.MaxDuration.Std(), w.MinDuration.Std()), "maxDuration")
	case w.MaxWait <= 0:
		return w, bad("want a positive duration", "maxWait")
	case !(w.TimeScale >= 1 && w.TimeScale <= maxTimeScale): // also NaN
		return w, bad(fmt.Sprintf("%g: want 1 (no compression) to %d", w.TimeScale, maxTimeScale), "timeScale")
	case w.replay(w.MinDuration.Std()) < minReplayDuration:
		return w, bad(fmt.Sprintf("%s at timeScale %g replays in %s: the control plane takes milliseconds per pod, so a job must last at least %s on the replay's clock",
			w.MinDuration.Std(), w.TimeScale, w.replay(w.MinDuration.Std()).Round(time.Millisecond), minReplayDuration), "minDuration")
	}
	if len(w.Sizes) == 0 {
		return w, bad("no job sizes", "sizes")
	}
	for _, k := range slices.Sorted(maps.Keys(w.Sizes)) {
		if k < 1 || k > 8 {
			return w, bad(fmt.Sprintf("%d GPUs: want 1 to 8", k), "sizes", strconv.Itoa(k))
		}
		if w.Sizes[k] < 0 {
			return w, bad(fmt.Sprintf("weight %d: want 0 or more", w.Sizes[k]), "sizes", strconv.Itoa(k))
		}
	}
	if w.totalWeight() == 0 {
		return w, bad("every weight is 0", "sizes")
	}
	if err := w.TimeModel.validate(w.Sizes, bad); err != nil {
		return w, err
	}
	return w, nil
}

func (w WorkloadSpec) totalWeight() int {
	n := 0
	for _, v := range w.Sizes {
		n += v
	}
	return n
}

// machineName names the pool's machine in messages: its shape or file.
func (p Pool) machineName() string {
	switch {
	case p.NCCLXML != "":
		return p.NCCLXML
	case p.Sysfs != "":
		return p.Sysfs
	}
	return p.Machine
}

// node resolves the pool's machine to a simulated node.
func (p Pool) node() (cluster.NodeSpec, error) {
	switch {
	case p.NCCLXML != "":
		f, err := os.Open(p.NCCLXML)
		if err != nil {
			return cluster.NodeSpec{}, err
		}
		defer f.Close()
		t, err := ncclxml.Parse(f)
		if err != nil {
			return cluster.NodeSpec{}, fmt.Errorf("%s: %w", p.NCCLXML, err)
		}
		return cluster.NodeSpec{Topology: t}, nil
	case p.Sysfs != "":
		t, err := discovery.Host{SysfsRoot: p.Sysfs, NVMLMode: discovery.NVMLOff}.Discover()
		if err != nil {
			return cluster.NodeSpec{}, fmt.Errorf("%s: %w", p.Sysfs, err)
		}
		if len(t.GPUs) == 0 {
			return cluster.NodeSpec{}, fmt.Errorf("%s: no NVIDIA GPU under bus/pci/devices", p.Sysfs)
		}
		return cluster.NodeSpec{Topology: t}, nil
	}
	if name, ok := strings.CutPrefix(p.Machine, machines.ProfilePrefix); ok {
		t, err := profiles.Load(name)
		if err != nil {
			return cluster.NodeSpec{}, err
		}
		return cluster.NodeSpec{Topology: t}, nil
	}
	if m, ok := machines.Lookup(p.Machine); ok {
		return cluster.NodeSpec{Machine: m.Build}, nil
	}
	if now, ok := renamedMachines[p.Machine]; ok {
		return cluster.NodeSpec{}, fmt.Errorf("machine %q is called %q now (one name per shape in the CLI, the simulator and dra claims)", p.Machine, now)
	}
	return cluster.NodeSpec{}, fmt.Errorf("unknown machine %q (known: %s; or give ncclXML or sysfs)", p.Machine, strings.Join(MachineNames(), ", "))
}

// renamedMachines are the simulator's former names of catalogue shapes.
var renamedMachines = map[string]string{"half-nics": "half-nic-8gpu-2nic", "h20-sriov": "h20-3e-8gpu-11nic-sriov"}

// MachineNames are the catalogue's names a pool can give (pkg/machines).
func MachineNames() []string { return machines.Names() }

// job is one pod of the workload.
type job struct {
	Name     string
	GPUs     int
	RDMA     bool
	VF       bool
	At       time.Duration // submission, from the start
	Duration time.Duration
}

// draw lays the workload out in time for a cluster of capacity GPUs: the
// same seed and capacity give the same jobs.
func (w WorkloadSpec) draw(capacity int) []job {
	rng := rand.New(rand.NewSource(w.Seed))
	var sizes []int
	for _, k := range slices.Sorted(maps.Keys(w.Sizes)) {
		for i := 0; i < w.Sizes[k]; i++ {
			sizes = append(sizes, k)
		}
	}
	meanSize := 0.0
	for _, s := range sizes {
		meanSize += float64(s)
	}
	meanSize /= float64(len(sizes))
	meanGPUSeconds := meanSize * (w.MinDuration.Std() + w.MaxDuration.Std()).Seconds() / 2
	var out []job
	at := time.Duration(0)
	for i := 0; i < w.Jobs; i++ {
		d := w.MinDuration.Std() + time.Duration(rng.Int63n(int64(w.MaxDuration-w.MinDuration)+1))
		j := job{Name: fmt.Sprintf("job-%03d", i), GPUs: sizes[rng.Intn(len(sizes))], RDMA: rng.Float64() < w.RDMAShare, At: at, Duration: d}
		j.VF = j.RDMA && rng.Float64() < w.VFShare
		out = append(out, j)
		// Poisson arrivals at the rate that offers the ramp's load: rate =
		// load x capacity / mean GPU-seconds of a job.
		gap := w.Interarrival.Std()
		if gap == 0 {
			f := 0.0
			if w.Jobs > 1 {
				f = float64(i) / float64(w.Jobs-1)
			}
			rate := (w.Load.From + (w.Load.To-w.Load.From)*f) * float64(capacity) / meanGPUSeconds
			gap = time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		}
		at += gap.Round(time.Millisecond)
	}
	return out
}

// check refuses a workload the cluster can never run.
func (w WorkloadSpec) check(nodes []nodeInfo) error {
	most, vfs := 0, false
	for _, n := range nodes {
		most = max(most, len(n.GPUs))
		vfs = vfs || n.VFNICs > 0
	}
	sizes := slices.Sorted(maps.Keys(w.Sizes))
	slices.Reverse(sizes)
	for _, k := range sizes {
		if w.Sizes[k] > 0 && k > most {
			return fmt.Errorf("workload sizes: %d GPUs, but the largest node has %d", k, most)
		}
	}
	if w.VFShare > 0 && w.RDMAShare > 0 && !vfs {
		return fmt.Errorf("workload vfShare %g, but no node of the cluster has SR-IOV VFs (machine h20-3e-8gpu-11nic-sriov has)", w.VFShare)
	}
	return nil
}

// nodeInfo is what the accounting needs of a node: its GPUs' bus IDs in
// position order, the level of each to its nearest RDMA NIC, and to the NIC
// behind each SR-IOV VF.
type nodeInfo struct {
	Name    string
	GPUs    []string
	Aligned []bool // Best[i] is PIX/PXB
	// Best is each GPU's level to its nearest NIC (not a VF): what NCCL
	// picks for a job that may use every NIC (rdma/hca).
	Best []topology.Level
	// VFLevels is, per VF address, each GPU's level to the VF's NIC, and
	// NICLevels, per RDMA NIC (PF) name, each GPU's level to it.
	VFLevels  map[string][]topology.Level
	NICLevels map[string][]topology.Level
	VFNICs    int
	// VFGroup is the most GPUs at PIX/PXB to one NIC with VFs: a pod with
	// one VF uses one NIC, so that is the largest VF job that can align.
	VFGroup int
}

func describe(name string, t *topology.Topology) nodeInfo {
	n := nodeInfo{Name: name, VFLevels: map[string][]topology.Level{}, NICLevels: map[string][]topology.Level{}}
	for _, nic := range t.NICs {
		if nic.PhysFn == "" {
			for _, g := range t.GPUs {
				n.NICLevels[nic.Name] = append(n.NICLevels[nic.Name], t.PCILevel(g.PCI, nic.PCI))
			}
		}
		if nic.PhysFn == "" && len(nic.VFs) > 0 {
			n.VFNICs++
			near := 0
			var levels []topology.Level
			for _, g := range t.GPUs {
				l := t.PCILevel(g.PCI, nic.PCI)
				levels = append(levels, l)
				if l.GPUDirectCapable() {
					near++
				}
			}
			n.VFGroup = max(n.VFGroup, near)
			for _, vf := range nic.VFs {
				n.VFLevels[vf] = levels
			}
		}
	}
	for _, g := range t.GPUs {
		n.GPUs = append(n.GPUs, g.PCI.Address)
		best := topology.LevelSYS
		for _, nic := range t.NICs {
			if nic.PhysFn == "" {
				best = min(best, t.PCILevel(g.PCI, nic.PCI))
			}
		}
		n.Best = append(n.Best, best)
		n.Aligned = append(n.Aligned, best.GPUDirectCapable())
	}
	return n
}

// worst is the worst level among the GPU positions a job got, each to its
// nearest NIC: of the NICs it claimed (DRA), of those behind its VFs, or
// of all (rdma/hca).
func (n nodeInfo) worst(a kubeletsim.Assignment) topology.Level {
	gpus, vfs := a.GPUs, a.VFs
	w := topology.LevelPIX
	for _, pos := range gpus {
		best := topology.LevelSYS
		switch {
		case len(a.NICs) > 0:
			for _, nic := range a.NICs {
				if l := n.NICLevels[nic]; pos < len(l) {
					best = min(best, l[pos])
				}
			}
		case len(vfs) > 0:
			for _, vf := range vfs {
				if l := n.VFLevels[vf]; pos < len(l) {
					best = min(best, l[pos])
				}
			}
		case pos < len(n.Best):
			best = n.Best[pos]
		}
		w = max(w, best)
	}
	return w
}

// alignedCount is how many of the node's GPUs are aligned.
func (n nodeInfo) alignedCount() int {
	c := 0
	for _, a := range n.Aligned {
		if a {
			c++
		}
	}
	return c
}

// round2 keeps reports readable and JSON equal to the table.
func round2(f float64) float64 { return math.Round(f*100) / 100 }
