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
	"github.com/nicaffinity/nicaffinity/pkg/apis/config"
	"github.com/nicaffinity/nicaffinity/pkg/devices"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/placement"
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

// WorkloadSpec is the jobs to replay.
type WorkloadSpec struct {
	Jobs int `yaml:"jobs" json:"jobs"`
	// Sizes weighs one-pod job sizes in GPUs (1: 4 means four parts in the
	// draw), and MultiPod jobs of P pods of G GPUs each, written "PxG"
	// ("4x8": 1), in the same draw. A job's pods run together: it starts
	// when its last pod runs, and communicates at the speed of its worst.
	Sizes    map[int]int    `yaml:"sizes" json:"sizes"`
	MultiPod map[string]int `yaml:"multiPod,omitempty" json:"multiPod,omitempty"`
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
	// Arrival is "poisson" (the Load ramp or Interarrival) or "backlog":
	// every job is submitted at the start, so that makespan measures how
	// fast the cluster gets through the same work.
	Arrival string `yaml:"arrival,omitempty" json:"arrival,omitempty"`
	Seed    int64  `yaml:"seed" json:"seed"`
	// TimeScale is refused with a message: the replay no longer compresses
	// the wall clock.
	TimeScale float64 `yaml:"timeScale,omitempty" json:"-"`
	// trace, when set, is the jobs (WithTrace); Trace names its file.
	trace *Trace
	Trace string `yaml:"-" json:"trace,omitempty"`
}

// Arrival patterns.
const (
	ArrivalPoisson = "poisson"
	ArrivalBacklog = "backlog"
)

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
// anywhere), the half-NIC shape (switches without a NIC), an H20 with
// SR-IOV VFs on two of its NICs, and GB200 trays (4 GPUs, each aligned at
// NCCL's P2C through its Grace, where nvidia-smi prints SYS). The load rises to 90% of the GPUs. Jobs
// run 15 to 60 minutes of workload time (the replay's virtual clock).
var (
	DefaultCluster = ClusterSpec{Pools: []Pool{
		{Name: "h100", Count: 2, Machine: "hgx-h100-8gpu-8nic"},
		{Name: "a100", Count: 1, Machine: "dgx-a100-8gpu-10nic"},
		{Name: "ndv2", Count: 1, Machine: "profile/azure-ndv2-v100-8gpu"},
		{Name: "half", Count: 2, Machine: "half-nic-8gpu-2nic"},
		{Name: "h20", Count: 1, Machine: "h20-3e-8gpu-11nic-sriov"},
		{Name: "gb200", Count: 2, Machine: "gb200-tray-4gpu-8nic"},
	}}
	DefaultWorkload = WorkloadSpec{Jobs: 64, Sizes: map[int]int{1: 4, 2: 3, 4: 2, 8: 1}, RDMAShare: 0.7, VFShare: 0.1,
		Load: Load{From: 0.3, To: 0.9}, MinDuration: Duration(15 * time.Minute), MaxDuration: Duration(60 * time.Minute),
		MaxWait: Duration(3 * time.Hour), TimeModel: DefaultTimeModel, Arrival: ArrivalPoisson, Seed: 1}
)

// Scenario is a bundled cluster and workload.
type Scenario struct {
	Cluster  ClusterSpec
	Workload WorkloadSpec
	// Parallel is how many replays run at a time. On the virtual clock it
	// changes how long a run takes, never its figures.
	Parallel int
}

// Scenarios are the bundled ones: "default" (make demo), "backlog" (the
// default's cluster with 96 jobs all waiting at the start: makespan is
// throughput there), "large" (64 nodes of the same shapes in about the same
// proportions, 1000 jobs) and "xlarge" (512 nodes, 10,000 jobs).
var Scenarios = map[string]Scenario{
	"default": {Cluster: DefaultCluster, Workload: DefaultWorkload, Parallel: 4},
	"backlog": {Cluster: DefaultCluster, Workload: BacklogWorkload, Parallel: 4},
	"large":   {Cluster: LargeCluster, Workload: LargeWorkload, Parallel: 2},
	"xlarge":  {Cluster: XLargeCluster, Workload: XLargeWorkload, Parallel: 1},
	"jobs":    {Cluster: JobsCluster, Workload: JobsWorkload, Parallel: 3},
}

// JobsCluster and JobsWorkload are the "jobs" scenario: mostly multi-pod
// RDMA jobs (2 or 4 pods of 1, 2 or 4 GPUs) on HGX H100 nodes (a NIC per
// GPU, rails 0-7) and half-NIC nodes (rails 0-1, each next to two GPUs),
// where a job's pods can be aligned on one rail set or on several.
var (
	JobsCluster = ClusterSpec{Pools: []Pool{
		{Name: "h100", Count: 4, Machine: "hgx-h100-8gpu-8nic"},
		{Name: "half", Count: 4, Machine: "half-nic-8gpu-2nic"},
	}}
	JobsWorkload = func() WorkloadSpec {
		w := DefaultWorkload
		w.Jobs, w.RDMAShare, w.VFShare = 48, 0.9, 0
		w.Sizes = map[int]int{1: 1, 2: 1}
		w.MultiPod = map[string]int{"2x1": 2, "2x2": 3, "4x2": 3, "2x4": 2, "4x1": 1}
		return w
	}()
)

// BacklogWorkload submits the default's job mix, half again as many, all at
// once. Its RDMA jobs use the shared rdma/hca resource (no VFs), so every
// one can be aligned on some node and no column gives a job up (maxWait is
// past any makespan): makespan then counts the same work in every column.
var BacklogWorkload = func() WorkloadSpec {
	w := DefaultWorkload
	w.Jobs, w.Arrival, w.MaxWait, w.VFShare = 96, ArrivalBacklog, Duration(maxDuration), 0
	return w
}()

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
		w.Jobs = 1000
		return w
	}()
	XLargeCluster = func() ClusterSpec {
		var c ClusterSpec
		for _, p := range LargeCluster.Pools {
			p.Count *= 8
			c.Pools = append(c.Pools, p)
		}
		return c
	}()
	XLargeWorkload = func() WorkloadSpec {
		w := DefaultWorkload
		w.Jobs = 10_000
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
	// maxJobPods caps a multi-pod job; maxLoad the offered load (above 1
	// jobs queue up: a backlog that builds over time).
	maxJobPods = 64
	maxLoad    = 10
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
	if w.TimeModel.CrossRail == nil {
		w.TimeModel.CrossRail = DefaultTimeModel.CrossRail
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
	case w.Interarrival == 0 && !(w.Load.From > 0 && w.Load.From <= maxLoad):
		return w, bad(fmt.Sprintf("%g: want a GPU load in (0, %d] (above 1, jobs queue up)", w.Load.From, maxLoad), "load", "from")
	case w.Interarrival == 0 && !(w.Load.To > 0 && w.Load.To <= maxLoad):
		return w, bad(fmt.Sprintf("%g: want a GPU load in (0, %d] (above 1, jobs queue up)", w.Load.To, maxLoad), "load", "to")
	case w.Arrival != "" && w.Arrival != ArrivalPoisson && w.Arrival != ArrivalBacklog:
		return w, bad(fmt.Sprintf("%q: want %s or %s", w.Arrival, ArrivalPoisson, ArrivalBacklog), "arrival")
	case w.TimeScale != 0:
		return w, bad("the replay runs on a virtual clock now (docs/simulate.md), so there is nothing to compress: remove timeScale", "timeScale")
	case w.MinDuration <= 0:
		return w, bad("want a positive duration", "minDuration")
	case w.MaxDuration < w.MinDuration:
		return w, bad(fmt.Sprintf("%s is less than minDuration %s", w.MaxDuration.Std(), w.MinDuration.Std()), "maxDuration")
	case w.MaxWait <= 0:
		return w, bad("want a positive duration", "maxWait")
	}
	if len(w.Sizes) == 0 && len(w.MultiPod) == 0 {
		return w, bad("no job sizes", "sizes")
	}
	for _, k := range slices.Sorted(maps.Keys(w.MultiPod)) {
		if _, err := parseShape(k); err != nil {
			return w, bad(err.Error(), "multiPod", k)
		}
		if w.MultiPod[k] < 0 {
			return w, bad(fmt.Sprintf("weight %d: want 0 or more", w.MultiPod[k]), "multiPod", k)
		}
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
	if err := w.TimeModel.validate(w.podSizes(), bad); err != nil {
		return w, err
	}
	return w, nil
}

func (w WorkloadSpec) totalWeight() int {
	n := 0
	for _, sh := range w.shapes() {
		n += sh.weight
	}
	return n
}

// shape is a job's pods and GPUs per pod, with its weight in the draw.
type shape struct {
	pods, gpus, weight int
}

// parseShape reads "PxG": P pods (2 to maxJobPods) of G GPUs (1 to 8).
func parseShape(k string) (shape, error) {
	ps, gs, ok := strings.Cut(k, "x")
	p, perr := strconv.Atoi(ps)
	g, gerr := strconv.Atoi(gs)
	switch {
	case !ok || perr != nil || gerr != nil:
		return shape{}, fmt.Errorf("%q: want PxG, P pods of G GPUs (like 4x8)", k)
	case p < 2 || p > maxJobPods:
		return shape{}, fmt.Errorf("%q: %d pods: want 2 to %d (one-pod jobs go under sizes)", k, p, maxJobPods)
	case g < 1 || g > 8:
		return shape{}, fmt.Errorf("%q: %d GPUs a pod: want 1 to 8", k, g)
	}
	return shape{pods: p, gpus: g}, nil
}

// shapes are the draw's job shapes in a fixed order: one-pod sizes, then
// multi-pod shapes by pods and GPUs.
func (w WorkloadSpec) shapes() []shape {
	var out []shape
	for _, k := range slices.Sorted(maps.Keys(w.Sizes)) {
		out = append(out, shape{pods: 1, gpus: k, weight: w.Sizes[k]})
	}
	var multi []shape
	for k, v := range w.MultiPod {
		if sh, err := parseShape(k); err == nil {
			sh.weight = v
			multi = append(multi, sh)
		}
	}
	slices.SortFunc(multi, func(a, b shape) int {
		if a.pods != b.pods {
			return a.pods - b.pods
		}
		return a.gpus - b.gpus
	})
	return append(out, multi...)
}

// podSizes weighs the GPUs per pod the draw can give.
func (w WorkloadSpec) podSizes() map[int]int {
	out := map[int]int{}
	for _, sh := range w.shapes() {
		out[sh.gpus] += sh.weight
	}
	return out
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

// job is one job of the workload: Pods pods (at least 1) of GPUs GPUs.
type job struct {
	Name     string
	Pods     int
	GPUs     int
	RDMA     bool
	VF       bool
	At       time.Duration // submission, from the start
	Duration time.Duration
}

// podName is the name of the job's i-th pod: the job's own for one pod.
func (j job) podName(i int) string {
	if j.Pods <= 1 {
		return j.Name
	}
	return fmt.Sprintf("%s-%d", j.Name, i)
}

// totalGPUs is the job's GPUs over all its pods.
func (j job) totalGPUs() int { return max(1, j.Pods) * j.GPUs }

// draw lays the workload out in time for a cluster of capacity GPUs: the
// same seed and capacity give the same jobs.
func (w WorkloadSpec) draw(capacity int) []job {
	rng := rand.New(rand.NewSource(w.Seed))
	var draw []shape
	meanGPUs := 0.0
	for _, sh := range w.shapes() {
		for i := 0; i < sh.weight; i++ {
			draw = append(draw, sh)
			meanGPUs += float64(sh.pods * sh.gpus)
		}
	}
	meanGPUs /= float64(len(draw))
	meanGPUSeconds := meanGPUs * (w.MinDuration.Std() + w.MaxDuration.Std()).Seconds() / 2
	var out []job
	at := time.Duration(0)
	for i := 0; i < w.Jobs; i++ {
		d := w.MinDuration.Std() + time.Duration(rng.Int63n(int64(w.MaxDuration-w.MinDuration)+1))
		sh := draw[rng.Intn(len(draw))]
		j := job{Name: fmt.Sprintf("job-%03d", i), Pods: sh.pods, GPUs: sh.gpus, RDMA: rng.Float64() < w.RDMAShare, At: at, Duration: d}
		j.VF = j.RDMA && rng.Float64() < w.VFShare
		out = append(out, j)
		if w.Arrival == ArrivalBacklog {
			continue
		}
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
	biggest := 0
	for _, sh := range w.shapes() {
		if sh.weight > 0 {
			biggest = max(biggest, sh.gpus)
		}
	}
	if biggest > most {
		return fmt.Errorf("workload: pods of %d GPUs, but the largest node has %d", biggest, most)
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
	// VFGroups is, per NIC with VFs, how many GPUs are aligned to it, and
	// Alignable how many GPUs have some NIC aligned: what the bound counts,
	// as the placement package answers it (boundCapacity).
	VFGroups  []int
	Alignable int
	// Rail is, per GPU, the rail of the NIC it is aligned to (the nearest
	// PF, the first in PCI order among equals), as the exporter publishes
	// rails by PCI rank; "" for a GPU aligned to none.
	Rail []string
}

// capacity is what the bound counts of a machine (boundCapacity).
type capacity struct {
	alignable int
	vfGroups  []int
}

// boundCapacity asks the placement package what the scheduler would ask
// it of the machine with every pod gone: the object its exporter publishes
// (its VFs offered as the simulated kubelets offer them), compiled, at the
// plugin's default level: how many GPUs could be aligned, and per NIC with
// VFs how many GPUs are aligned to it. The bound then holds no schedule of
// the plugin can beat it by a placement the plugin would count aligned.
func boundCapacity(name string, t *topology.Topology) (capacity, error) {
	var vfs []devices.Device
	for _, nic := range t.NICs {
		for _, vf := range nic.VFs {
			vfs = append(vfs, devices.Device{Resource: simSRIOVResource, ID: vf})
		}
	}
	obj, _ := nrt.ObjectFor(name, t, vfs)
	c, err := nrt.Compile(obj, config.DefaultGPUResourceName)
	if err != nil {
		return capacity{}, fmt.Errorf("the object its exporter would publish: %w", err)
	}
	li := placement.LevelIndex(config.DefaultLevel())
	return capacity{alignable: placement.Capacity(c, li, "", false), vfGroups: placement.NICCapacities(c, li, simSRIOVResource)}, nil
}

// simSRIOVResource is the SR-IOV resource the simulated kubelets offer VFs
// as (cluster.DefaultOptions).
const simSRIOVResource = "openshift.io/sriov_highnet"

// describe reduces a node to what the time model and the bound read. Its
// levels are the decision levels (topology.AlignLevels): P2C where NCCL's
// rule gives a Grace GPU's pair P2C, so NCCL's eligibility decides; what
// the bound counts is the placement package's (caps).
func describe(name string, t *topology.Topology, caps capacity) nodeInfo {
	n := nodeInfo{Name: name, VFLevels: map[string][]topology.Level{}, NICLevels: map[string][]topology.Level{},
		Alignable: caps.alignable, VFGroups: caps.vfGroups}
	for _, g := range caps.vfGroups {
		n.VFGroup = max(n.VFGroup, g)
	}
	align := t.AlignLevels()
	for j, nic := range t.NICs {
		if nic.PhysFn == "" {
			for i := range t.GPUs {
				n.NICLevels[nic.Name] = append(n.NICLevels[nic.Name], align[i][j])
			}
		}
		if nic.PhysFn == "" && len(nic.VFs) > 0 {
			n.VFNICs++
			var levels []topology.Level
			for i := range t.GPUs {
				levels = append(levels, align[i][j])
			}
			for _, vf := range nic.VFs {
				n.VFLevels[vf] = levels
			}
		}
	}
	rails := nrt.RailsOf(t, nrt.Rails{Source: nrt.RailFromPCIRank})
	for i, g := range t.GPUs {
		n.GPUs = append(n.GPUs, g.PCI.Address)
		best, rail := topology.LevelSYS, ""
		for j, nic := range t.NICs {
			if nic.PhysFn == "" && align[i][j] < best {
				best, rail = align[i][j], rails[nic.Name]
			}
		}
		if !best.GPUDirectCapable() {
			rail = ""
		}
		n.Best = append(n.Best, best)
		n.Aligned = append(n.Aligned, best.GPUDirectCapable())
		n.Rail = append(n.Rail, rail)
	}
	return n
}

// railsOf is the set of rails a pod's GPUs (positions) are aligned to,
// sorted; ok is false when some GPU is aligned to no NIC with a rail.
func (n nodeInfo) railsOf(gpus []int) (rails []string, ok bool) {
	for _, g := range gpus {
		if g < 0 || g >= len(n.Rail) || n.Rail[g] == "" {
			return nil, false
		}
		if !slices.Contains(rails, n.Rail[g]) {
			rails = append(rails, n.Rail[g])
		}
	}
	slices.Sort(rails)
	return rails, true
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

// alignedCount is how many of the node's GPUs could be aligned.
func (n nodeInfo) alignedCount() int { return n.Alignable }

// round2 keeps reports readable and JSON equal to the table.
func round2(f float64) float64 { return math.Round(f*100) / 100 }
