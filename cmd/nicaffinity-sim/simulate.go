package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/nicaffinity/nicaffinity/internal/sim"
	"github.com/nicaffinity/nicaffinity/internal/simbench"
	"github.com/nicaffinity/nicaffinity/pkg/annotations"
)

type simulateOptions struct {
	cluster, workload, output, report string
	trace                             string
	scenarios                         []string
	alignmentWait                     string
	cpuProfile                        string
	runs, parallel                    int
	columns                           []string
	dra, apiServer                    bool
	shard                             string
	merge                             bool
}

// defaultRuns is make demo's three seeds: enough for a median and a range.
const defaultRuns = 3

func newSimulateCommand() *cobra.Command {
	o := &simulateOptions{}
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "Replay a GPU workload on a simulated cluster with and without nicaffinity",
		Long: `Start an in-memory Kubernetes API (--apiserver: a real kube-apiserver
and etcd in-process), simulated GPU nodes with the real topology exporter,
and the real scheduler; replay the same
workload through nicaffinity's policies (bounded, the default, required and
preferred, with the allocation proxy; required as advice to the device plugin
alone; where jobs have several pods, bounded with each job a gang on its
rails) and through the default scheduler (with and without gangs where jobs
have several pods), each on a fresh cluster, and report how soon the work
finished: makespan, job completion times and the GPU-hours lost to
misalignment (a job's communication runs at the bandwidth its worst GPU-NIC
level allows), then the levels of the GPU-NIC pairs the kubelet handed out,
the share of RDMA jobs that could use GPUDirect RDMA next to a bound no
schedule can exceed (jobs may wait until they are given up), waiting and
latencies. --runs N replays the workload with N seeds and prints the median
and range of each figure; a verdict line says which column finished the
work sooner than the default scheduler, by which figure, and when the
spread over the runs decides nothing.

Without --cluster and --workload it uses a default mix of real machines
(HGX H100, DGX A100, Azure NDv2, a shape with NIC-less switches, an H20 with
SR-IOV VFs) and a workload whose GPU load rises from 30% to 90%. --scenario
backlog puts half again as many jobs in the queue at once (makespan is
throughput there), jobs is mostly multi-pod jobs on rail-optimized nodes,
large is 64 nodes of the default's shapes and 1000 jobs, xlarge 512 nodes
and 10,000.

--dra replays the workload on a cluster with no device plugins: stand-ins of
the GPU and NIC DRA drivers publish every node's devices, the scheduler's
DynamicResources plugin allocates them, and the columns differ in the claims
jobs make: nicaffinity's generated templates (GPUs that have an aligned NIC
with every NIC, shared; GPUs apart from NICs first for jobs without one), a
GPU-NIC pair per GPU matched on pcieRoot, and GPUs with a NIC, nothing
matched. Pools of NCCL topologies (which name no PCIe root complexes) are
left out of the bundled scenarios' clusters.

A replay's columns and seeds are independent: --shard I/N runs every N-th
of them, from the I-th (0-based), and prints their results as a shard file
(JSON); --merge FILES... reads the N shard files of one set of flags and
prints the report one process would have (docs/simulate.md, Shards).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.merge {
				return o.mergeShards(args, cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			if len(args) > 0 {
				return fmt.Errorf("unexpected arguments %q (only --merge takes files)", args)
			}
			if o.trace != "" && !cmd.Flags().Changed("runs") {
				o.runs = 1 // a trace is one job list: seeds change nothing
			}
			return o.run(cmdContext(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.cluster, "cluster", "", "cluster spec YAML (pools of count x machine, ncclXML or sysfs)")
	f.StringVar(&o.trace, "trace", "", "replay this job list (CSV: arrival,pods,gpus,duration,network; docs/simulate.md) instead of drawing jobs")
	f.StringVar(&o.workload, "workload", "", "workload spec YAML (jobs, sizes, rdmaShare, vfShare, load, durations, seed)")
	f.StringVarP(&o.output, "output", "o", "text", "text or json")
	f.StringVar(&o.report, "report", "", "also write an HTML report with charts into this directory")
	f.IntVar(&o.runs, "runs", defaultRuns, "replay the workload with this many seeds (seed, seed+1, ...) and report the median and range")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the replays (go tool pprof) to this file")
	f.IntVar(&o.parallel, "parallel", 0, "replays at a time, each on its own cluster (default: the scenario's: "+scenarioParallel()+")")
	f.StringSliceVar(&o.columns, "columns", nil, "compare only these columns (default: all)")
	f.StringVar(&o.alignmentWait, "alignment-wait", "", "the bounded columns' wait for aligned GPUs (nicaffinity.io/alignment-wait on every pod; default: the plugin's alignmentWait)")
	f.StringSliceVar(&o.scenarios, "scenario", []string{"default"}, "bundled cluster and workload: "+strings.Join(slices.Sorted(maps.Keys(sim.Scenarios)), ", ")+" (--cluster and --workload replace its parts); several, comma-separated, make one report each, in that order")
	f.BoolVar(&o.apiServer, "apiserver", false, "replay on a real kube-apiserver and etcd (the reference) instead of the in-memory API; DRA columns always do")
	f.StringVar(&o.shard, "shard", "", "run one share I/N of the replays (every N-th column and seed from the I-th, 0-based) and print a shard file for --merge")
	f.BoolVar(&o.merge, "merge", false, "merge the shard files given as arguments into one report")
	f.BoolVar(&o.dra, "dra", false, "a DRA cluster: compare how jobs claim GPUs and NICs (docs/dra.md)")
	return cmd
}

// scenarioParallel lists each bundled scenario's replays at a time, for
// --parallel's help, so that the help cannot drift from sim.Scenarios.
func scenarioParallel() string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(sim.Scenarios)) {
		parts = append(parts, fmt.Sprintf("%d for %s", sim.Scenarios[name].Parallel, name))
	}
	return strings.Join(parts, ", ")
}

// specs are the scenario's cluster and workload, each replaced by its file
// when given.
func (o *simulateOptions) specs(sc sim.Scenario) (sim.ClusterSpec, sim.WorkloadSpec, error) {
	c, w := sc.Cluster, sc.Workload
	if o.cluster != "" {
		b, err := os.ReadFile(o.cluster)
		if err != nil {
			return c, w, err
		}
		if c, err = sim.ParseCluster(o.cluster, b); err != nil {
			return c, w, err
		}
	}
	if o.workload != "" {
		b, err := os.ReadFile(o.workload)
		if err != nil {
			return c, w, err
		}
		if w, err = sim.ParseWorkload(o.workload, b); err != nil {
			return c, w, err
		}
	}
	if o.trace != "" {
		b, err := readCapped(o.trace, maxTraceFile)
		if err != nil {
			return c, w, err
		}
		t, err := sim.ParseTrace(o.trace, b)
		if err != nil {
			return c, w, err
		}
		w = w.WithTrace(t)
	}
	return c, w, nil
}

func (o *simulateOptions) run(ctx context.Context, out, progress io.Writer) error {
	if o.output != "text" && o.output != "json" {
		return fmt.Errorf("--output %q: want text or json", o.output)
	}
	if o.runs < 1 || o.runs > maxRuns {
		return fmt.Errorf("--runs %d: want 1 to %d", o.runs, maxRuns)
	}
	if len(o.scenarios) == 0 {
		return fmt.Errorf("--scenario: name at least one")
	}
	if o.trace != "" && o.runs != 1 {
		return fmt.Errorf("--trace replays one job list, the same in every run: give --runs 1")
	}
	var scs []sim.Scenario
	for _, name := range o.scenarios {
		sc, ok := sim.Scenarios[name]
		if !ok {
			return fmt.Errorf("--scenario %q: want %s", name, strings.Join(slices.Sorted(maps.Keys(sim.Scenarios)), " or "))
		}
		scs = append(scs, sc)
	}
	if o.parallel < 0 || o.parallel > maxParallel {
		return fmt.Errorf("--parallel %d: want 1 to %d", o.parallel, maxParallel)
	}
	defer tuneGC(simHeapFloor)()
	// Every scenario's plans are made first, so that a spec that does not
	// fit fails before anything runs.
	var reports []*sim.Report
	all, allCols, err := o.prepare(scs, progress)
	if err != nil {
		return err
	}
	stopProfile, err := simbench.StartCPUProfile(o.cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	share, err := parseShard(o.shard)
	if err != nil {
		return err
	}
	results := make([][][]sim.Result, len(all))
	task := 0
	for i, plans := range all {
		cols := allCols[i]
		parallel := o.parallel
		if parallel == 0 {
			parallel = scs[i].Parallel
		}
		if len(scs) > 1 {
			fmt.Fprintf(progress, "scenario %s\n", o.scenarios[i])
		}
		first := task
		task += len(plans) * len(cols)
		started := time.Now()
		rs, err := o.runAll(ctx, plans, cols, parallel, progress, func(plan, col int) bool { return share.takes(first + plan*len(cols) + col) })
		if err != nil {
			return err
		}
		results[i] = rs
		if share.of == 0 {
			rep, err := o.buildReport(plans, cols, rs, i, len(scs) > 1, progress)
			if err != nil {
				return err
			}
			rep.Replay = o.replayStats(plans, cols, time.Since(started))
			reports = append(reports, rep)
		}
	}
	if share.of > 0 {
		return o.writeShard(out, share, all, allCols, results)
	}
	return o.printReports(out, reports)
}

// buildReport makes scenario i's report from its results and writes its
// HTML when asked.
func (o *simulateOptions) buildReport(plans []*sim.Plan, cols []sim.Column, results [][]sim.Result, i int, several bool, progress io.Writer) (*sim.Report, error) {
	rep := sim.NewReport(plans[0], cols)
	for k, plan := range plans {
		if err := rep.Add(plan, results[k]); err != nil {
			return nil, err
		}
	}
	rep.Finish()
	if o.report != "" {
		dir := o.report
		if several {
			dir = filepath.Join(o.report, o.scenarios[i])
		}
		path, err := rep.WriteHTML(dir)
		if err != nil {
			return nil, fmt.Errorf("--report %s: %w", dir, err)
		}
		fmt.Fprintf(progress, "report: %s\n", path)
	}
	return rep, nil
}

// printReports prints the reports as --output asks.
func (o *simulateOptions) printReports(out io.Writer, reports []*sim.Report) error {
	if o.output == "json" {
		if len(reports) == 1 {
			return reports[0].JSON(out)
		}
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(reports)
	}
	for i, rep := range reports {
		if len(reports) > 1 {
			fmt.Fprintf(out, "== %s ==\n", o.scenarios[i])
		}
		rep.Format(out)
		if i+1 < len(reports) {
			fmt.Fprintln(out)
		}
	}
	return nil
}

// replayStats says how long a scenario's replays took and at what rate.
func (o *simulateOptions) replayStats(plans []*sim.Plan, cols []sim.Column, took time.Duration) *sim.ReplayStats {
	pods := 0
	for _, p := range plans {
		pods += p.Pods() * len(cols)
	}
	api := "in-memory"
	if o.apiServer {
		api = "kube-apiserver"
	}
	secs := took.Seconds()
	return &sim.ReplayStats{API: api, Seconds: math.Round(secs*10) / 10, Pods: pods, PodsPerSecond: math.Round(float64(pods) / max(secs, 0.001))}
}

// prepare makes every scenario's plans and picks each scenario's own
// columns (a column can be left out of one and run in another).
func (o *simulateOptions) prepare(scs []sim.Scenario, progress io.Writer) ([][]*sim.Plan, [][]sim.Column, error) {
	var all [][]*sim.Plan
	var allCols [][]sim.Column
	for _, sc := range scs {
		plans, c, err := o.plans(sc, progress)
		if err != nil {
			return nil, nil, err
		}
		all, allCols = append(all, plans), append(allCols, c)
	}
	return all, allCols, nil
}

// plans are a scenario's plans, one per seed, and the columns to run.
func (o *simulateOptions) plans(sc sim.Scenario, progress io.Writer) ([]*sim.Plan, []sim.Column, error) {
	cols := sim.Columns
	if o.dra {
		cols = sim.DRAColumns
	}
	if len(o.columns) > 0 {
		var err error
		if cols, err = sim.ColumnsNamed(o.columns); err != nil {
			return nil, nil, fmt.Errorf("--columns: %w", err)
		}
	}
	if o.alignmentWait != "" {
		if _, err := annotations.ParseAlignmentWait(o.alignmentWait); err != nil {
			return nil, nil, fmt.Errorf("--alignment-wait: %w", err)
		}
		cols = slices.Clone(cols)
		for i := range cols {
			if cols[i].Policy == annotations.PolicyBounded {
				cols[i].AlignmentWait = o.alignmentWait
			}
		}
	}
	c, w, err := o.specs(sc)
	if err != nil {
		return nil, nil, err
	}
	if o.dra && w.VFShare > 0 {
		// The draw is the same (the VF coin is tossed for every RDMA job
		// whatever the share), so the jobs are those of device-plugin mode.
		fmt.Fprintf(progress, "--dra: VF jobs (vfShare %g) claim NICs as the other RDMA jobs do: no SR-IOV DRA driver is simulated\n", w.VFShare)
		w.VFShare = 0
	}
	if o.dra && o.cluster == "" {
		var left []string
		c, left = sim.SysfsPools(c)
		for _, p := range left {
			fmt.Fprintf(progress, "--dra: pool %s left out: an NCCL topology names no PCIe root complexes, which DRA drivers publish\n", p)
		}
	}
	if o.trace != "" {
		fmt.Fprintf(progress, "--trace: %d jobs; maxWait %s applies (a job not running %s after it arrives is given up; a --workload file sets it)\n",
			w.Jobs, w.MaxWait.Std(), w.MaxWait.Std())
	}
	var plans []*sim.Plan
	for i := range o.runs {
		wi := w
		wi.Seed = w.Seed + int64(i)
		plan, err := sim.Prepare(c, wi)
		if err != nil {
			return nil, nil, err
		}
		if err := sim.CheckColumns(plan, cols); err != nil {
			return nil, nil, err
		}
		if l := plan.Offered(); o.trace != "" && i == 0 && l.Offered > 1 {
			fmt.Fprintf(progress, "--trace: the jobs ask %.0f GPU-hours over %.1f h of arrivals, %.1f times what the cluster's %d GPUs give in that time: queues grow, and jobs waiting past maxWait are given up\n",
				l.WorkHours, l.ArrivalHours, l.Offered, plan.GPUs())
		}
		plans = append(plans, plan)
	}
	if len(o.columns) == 0 {
		var dropped []string
		cols, dropped = sim.WithoutIdleGangs(plans, cols)
		if len(dropped) > 0 {
			fmt.Fprintf(progress, "%s left out: no multi-pod jobs, so each would place every pod as its column without gangs does\n", strings.Join(dropped, ", "))
		}
	}
	return plans, cols, nil
}

// maxTraceFile is how much of a --trace file is read: a little past what
// ParseTrace accepts, so that it can say how big the file is.
const maxTraceFile = 17 << 20

// readCapped reads at most limit bytes of a file.
func readCapped(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}

// maxRuns bounds --runs: each run is one cluster per column.
const maxRuns = 100

// maxParallel bounds --parallel: each replay is a control plane and a
// cluster in this process.
const maxParallel = 16

// runAll replays every plan through every column, parallel at a time, and
// returns the results per plan in column order. Replays run on virtual
// time, so running several at once changes how long they take, never what
// they report.
func (o *simulateOptions) runAll(ctx context.Context, plans []*sim.Plan, cols []sim.Column, parallel int, progress io.Writer, take func(plan, col int) bool) ([][]sim.Result, error) {
	type task struct{ plan, col int }
	var tasks []task
	for i := range plans {
		// Odd runs take the columns in reverse order, so that a drift of
		// the machine over the runs favours no column.
		for k := range cols {
			if i%2 == 1 {
				k = len(cols) - 1 - k
			}
			if take(i, k) {
				tasks = append(tasks, task{i, k})
			}
		}
	}
	results := make([][]sim.Result, len(plans))
	for i := range results {
		results[i] = make([]sim.Result, len(cols))
	}
	show := newProgressPrinter(progress)
	started := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for _, t := range tasks {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func(t task) {
			defer wg.Done()
			defer func() { <-sem }()
			plan, col := plans[t.plan], cols[t.col]
			label := fmt.Sprintf("run %d/%d %s", t.plan+1, len(plans), col.Name)
			show.line(fmt.Sprintf("%s (seed %d): %d jobs on a fresh cluster of %d nodes...", label, plan.Workload.Seed, plan.Jobs(), plan.Nodes()))
			start := time.Now()
			r, err := sim.Run(ctx, plan, col, sim.RunOptions{Progress: func(p sim.Progress) { show.show(label, p) }, APIServer: o.apiServer})
			show.finish(label)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("%s (seed %d): %w", col.Name, plan.Workload.Seed, err)
				}
				cancel()
				return
			}
			results[t.plan][t.col] = r
			show.line(fmt.Sprintf("%s: done in %s", label, time.Since(start).Round(time.Second)))
		}(t)
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	if firstErr != nil {
		return nil, firstErr
	}
	show.line(fmt.Sprintf("%d runs of %d columns in %s", len(plans), len(cols), time.Since(started).Round(time.Second)))
	return results, nil
}

// progressPrinter shows the replays in flight: one status line redrawn on
// a terminal, a line every five seconds elsewhere (CI logs). Replays call
// it from their own goroutines.
type progressPrinter struct {
	w     io.Writer
	tty   bool
	mu    sync.Mutex
	last  time.Time
	drawn bool
	live  map[string]sim.Progress
}

func newProgressPrinter(w io.Writer) *progressPrinter {
	p := &progressPrinter{w: w, live: map[string]sim.Progress{}}
	if f, ok := w.(*os.File); ok {
		p.tty = term.IsTerminal(int(f.Fd()))
	}
	return p
}

func (p *progressPrinter) status() string {
	var parts []string
	for _, label := range slices.Sorted(maps.Keys(p.live)) {
		s := p.live[label]
		parts = append(parts, fmt.Sprintf("%s %3.0fs: submitted %d/%d, waiting %d, running %d, finished %d",
			label, s.Elapsed.Seconds(), s.Submitted, s.Jobs, s.Waiting, s.Running, s.Ended))
	}
	return "  " + strings.Join(parts, " | ")
}

func (p *progressPrinter) show(label string, s sim.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.live[label] = s
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", p.status())
		p.drawn = true
		return
	}
	if time.Since(p.last) >= 5*time.Second {
		fmt.Fprintln(p.w, p.status())
		p.last = time.Now()
	}
}

// line prints a line above the status line.
func (p *progressPrinter) line(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
		p.drawn = false
	}
	fmt.Fprintln(p.w, s)
}

func (p *progressPrinter) finish(label string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.live, label)
}
