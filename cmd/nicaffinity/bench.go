package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/nicaffinity/nicaffinity/internal/sim"
)

func newBenchCommand() *cobra.Command {
	spec := sim.BenchSpec{}
	output := "text"
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the scheduler with and without nicaffinity (scheduler_perf style)",
		Long: `Start one in-process apiserver with --nodes GPU nodes (8 GPUs, HGX H100
NodeResourceTopology each; no kubelets: only scheduling is measured) and one
scheduler with two profiles: the shipped nicaffinity profile and the default
plugins alone. Feed them --pods 1-GPU RDMA pods per batch, alternately
A B B A, and print throughput and per-pod latency (creation to bound) for
each, and the throughput ratio. The client rate limit is lifted, as in
scheduler_perf. The plugin's own Filter and Score costs are Go benchmarks:
make bench.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBench(cmd.OutOrStdout(), cmd.ErrOrStderr(), spec, output)
		},
	}
	cmd.Flags().IntVar(&spec.Nodes, "nodes", 1000, "GPU nodes")
	cmd.Flags().IntVar(&spec.Pods, "pods", 1000, "pods per batch")
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	return cmd
}

func runBench(out, progress io.Writer, spec sim.BenchSpec, output string) error {
	if output != "text" && output != "json" {
		return fmt.Errorf("--output %q: want text or json", output)
	}
	if spec.Nodes <= 0 || spec.Pods <= 0 || spec.Pods > spec.Nodes*8 {
		return fmt.Errorf("--nodes and --pods must be positive, and --pods at most 8 x --nodes")
	}
	fmt.Fprintf(progress, "creating %d nodes, then 4 batches of %d pods (A B B A)...\n", spec.Nodes, spec.Pods)
	results, ratio, err := sim.Bench(cmdContext(), spec, progress)
	if err != nil {
		return err
	}
	if output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"nodes": spec.Nodes, "pods": spec.Pods, "results": results, "throughputRatio": ratio})
	}
	fmt.Fprintf(out, "%d nodes, %d pods per batch, A B B A\n", spec.Nodes, spec.Pods)
	fmt.Fprintf(out, "%-24s%14s%14s%14s\n", "profile", "pods/s", "p50 ms", "p99 ms")
	for _, r := range results {
		fmt.Fprintf(out, "%-24s%14.0f%14.1f%14.1f\n", r.Scheduler, r.PodsPerSec, r.LatencyP50Ms, r.LatencyP99Ms)
	}
	fmt.Fprintf(out, "throughput ratio (nicaffinity / default): %.2f\n", ratio)
	return nil
}
