package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/spf13/cobra"

	"github.com/nicaffinity/nicaffinity/internal/pluginbench"
	"github.com/nicaffinity/nicaffinity/internal/simbench"
)

type benchOptions struct {
	spec   simbench.BenchSpec
	output string
	micro  bool
	// cpuProfile of the whole process (apiserver, etcd and scheduler run
	// in it) during the batches.
	cpuProfile string
	configFile string
}

func newBenchCommand() *cobra.Command {
	o := &benchOptions{output: "text"}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the scheduler with and without nicaffinity (scheduler_perf style)",
		Long: `Start one in-process apiserver with --nodes GPU nodes (8 GPUs, HGX H100
NodeResourceTopology each; no kubelets: only scheduling is measured) and one
scheduler with two profiles: the shipped nicaffinity profile and the default
plugins alone. Feed them --pods 1-GPU RDMA pods per batch, alternately
A B B A, each batch created at once by several clients (while the scheduler
is held, with --arrival queued), and print for each profile: throughput
(pods over the time from the scheduler's release, or with --arrival burst
the first creation, to the last bind), the process's CPU time per pod,
latency to bound, the scheduler's own per-pod attempt latency, the p99 of
each extension point and its opportunistic batching; then the throughput
ratio and the plugin's micro-benchmarks (Filter, Score, a pod's cycle). The client rate
limits are lifted, as in scheduler_perf.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.Flags().IntVar(&o.spec.Nodes, "nodes", 1000, "GPU nodes")
	cmd.Flags().IntVar(&o.spec.Pods, "pods", 1000, "pods per batch")
	cmd.Flags().IntVar(&o.spec.Rounds, "rounds", 1, "rounds of A B B A in one process, the order turning each round (B A A B, A B B A, ...)")
	cmd.Flags().BoolVar(&o.spec.DefaultFirst, "default-first", false, "start with B A A B (default profile first) to check for order effects")
	cmd.Flags().StringSliceVar(&o.spec.Profiles, "profiles", nil, "profiles of --scheduler-config to measure, each against the default profile (default nicaffinity-scheduler)")
	cmd.Flags().BoolVar(&o.spec.NoiseFloor, "noise-floor", false, "also measure a second profile of the default plugins (default-copy) against the default profile: the ratio a profile gets from noise alone")
	cmd.Flags().DurationVar(&o.spec.MaxDuration, "max-duration", 0, "end early and report what was measured: no block of A B B A is started that would end (by the longest block so far) past this long after the start (0: no limit)")
	cmd.Flags().BoolVar(&o.micro, "micro", true, "also run the plugin's micro-benchmarks (Filter and Score per node, a pod's PreFilter, Reserve and Unreserve)")
	cmd.Flags().StringVar(&o.spec.Workload, "workload", simbench.WorkloadGPU, "gpu (one-GPU RDMA pods) or mixed (pods without GPUs, two-pod jobs on their rails, VF pods; docs/simulate.md)")
	cmd.Flags().StringVar(&o.spec.Arrival, "arrival", simbench.ArrivalQueued, "queued (each batch created while the scheduler is held, timed from its release to the last binding: the scheduler's own rate) or burst (created at once while it runs, timed from the first creation: the apiserver's intake too)")
	cmd.Flags().StringVarP(&o.output, "output", "o", "text", "text or json")
	cmd.Flags().StringVar(&o.configFile, "scheduler-config", "", "KubeSchedulerConfiguration with a nicaffinity-scheduler profile to measure instead of the shipped one")
	cmd.Flags().StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the run (go tool pprof) to this file")
	cmd.Flags().StringVar(&o.spec.ProfileDir, "batch-profiles", "", "write a CPU profile of each measured batch's timed part into this directory (<profile>-<batch>.pprof), to compare the profiles with go tool pprof -diff_base")
	return cmd
}

// microResult is one micro-benchmark.
type microResult struct {
	Name        string  `json:"name"`
	NsPerOp     float64 `json:"nsPerOp"`
	AllocsPerOp int64   `json:"allocsPerOp"`
}

func (o *benchOptions) run(out, progress io.Writer) error {
	if o.output != "text" && o.output != "json" {
		return fmt.Errorf("--output %q: want text or json", o.output)
	}
	spec := o.spec
	if o.configFile != "" {
		b, err := os.ReadFile(o.configFile)
		if err != nil {
			return err
		}
		spec.SchedulerConfig = string(b)
	}
	if spec.Nodes <= 0 || spec.Pods <= 0 || spec.Pods > spec.Nodes*8 {
		return fmt.Errorf("--nodes and --pods must be positive, and --pods at most 8 x --nodes")
	}
	if spec.Rounds < 1 || spec.Rounds > 100 {
		return fmt.Errorf("--rounds %d: want 1 to 100", spec.Rounds)
	}
	fmt.Fprintf(progress, "creating %d nodes, then %d round(s) of 4 batches of %d pods (A B B A, B A A B, ...)...\n", spec.Nodes, spec.Rounds, spec.Pods)
	if o.cpuProfile != "" && spec.ProfileDir != "" {
		return fmt.Errorf("--cpuprofile and --batch-profiles: choose one (Go runs one CPU profile at a time)")
	}
	stopProfile, err := simbench.StartCPUProfile(o.cpuProfile)
	if err != nil {
		return err
	}
	report, err := simbench.Bench(cmdContext(), spec, progress)
	stopProfile()
	if err != nil {
		return err
	}
	var micro []microResult
	if o.micro {
		fmt.Fprintln(progress, "micro-benchmarks...")
		for _, bm := range pluginbench.Benchmarks {
			r := testing.Benchmark(bm.F)
			if r.N == 0 {
				return fmt.Errorf("micro-benchmark %s failed", bm.Name)
			}
			micro = append(micro, microResult{Name: bm.Name, NsPerOp: float64(r.T.Nanoseconds()) / float64(r.N), AllocsPerOp: r.AllocsPerOp()})
		}
	}
	if o.output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"nodes": spec.Nodes, "pods": spec.Pods, "workload": spec.Workload, "arrival": spec.Arrival, "results": report.Results, "rounds": report.Rounds, "throughputRatio": report.Ratio, "stopped": report.Stopped, "micro": micro})
	}
	results, ratio := report.Results, report.Ratio
	fmt.Fprintf(out, "%d nodes, %d pods per batch, %d block(s) of A B B A\n", spec.Nodes, spec.Pods, len(report.Rounds))
	if report.Stopped != "" {
		fmt.Fprintln(out, report.Stopped)
	}
	fmt.Fprintf(out, "%-24s%10s%12s%12s%14s%14s\n", "profile", "pods/s", "e2e p50 ms", "e2e p99 ms", "attempt p50", "attempt p99")
	for _, r := range results {
		fmt.Fprintf(out, "%-24s%10.0f%12.1f%12.1f%14.2f%14.2f\n", r.Scheduler, r.PodsPerSec, r.LatencyP50Ms, r.LatencyP99Ms, r.AttemptP50Ms, r.AttemptP99Ms)
	}
	for _, r := range report.Rounds {
		fmt.Fprintf(out, "round %-24s %s ratio %.3f (%.0f vs %.0f pods/s)\n", r.Profile, r.Order, r.Ratio, r.PodsPerSec, r.DefaultPPS)
	}
	fmt.Fprintf(out, "throughput ratio (%s / default, all batches): %.2f\n", results[0].Scheduler, ratio)
	for _, r := range results {
		fmt.Fprintf(out, "%s attempts: %v\n", r.Scheduler, r.Attempts)
	}
	fmt.Fprintf(out, "\nCPU and memory a pod\n%-24s%10s%10s%12s%10s\n", "profile", "CPU ms", "GC ms", "alloc KB", "GC cycles")
	for _, r := range results {
		fmt.Fprintf(out, "%-24s%10.2f%10.2f%12.0f%10d\n", r.Scheduler, r.CPUMsPerPod, r.GCCPUMsPerPod, r.AllocKBPerPod, r.GCCycles)
	}
	fmt.Fprintf(out, "\nextension points, ms p50/p99 (scheduler_framework_extension_point_duration_seconds)\n%-24s", "profile")
	points := []string{"PreFilter", "Filter", "PreScore", "Score", "Reserve", "Permit", "Bind"}
	for _, p := range points {
		fmt.Fprintf(out, "%12s", p)
	}
	fmt.Fprintln(out)
	for _, r := range results {
		fmt.Fprintf(out, "%-24s", r.Scheduler)
		for _, p := range points {
			if v, ok := r.ExtensionPointsP99Ms[p]; ok {
				fmt.Fprintf(out, "%12s", fmt.Sprintf("%.2f/%.2f", r.ExtensionPointsP50Ms[p], v))
			} else {
				fmt.Fprintf(out, "%12s", "-")
			}
		}
		fmt.Fprintln(out)
	}
	if len(micro) > 0 {
		fmt.Fprintf(out, "\nNICAffinity micro-benchmarks (testing.Benchmark): Filter and Score per node, Cycle per pod\n")
		for _, m := range micro {
			fmt.Fprintf(out, "%-28s%10.1f ns/op%6d allocs/op\n", m.Name, m.NsPerOp, m.AllocsPerOp)
		}
	}
	return nil
}
