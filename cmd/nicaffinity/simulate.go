package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/nicaffinity/nicaffinity/internal/sim"
)

type simulateOptions struct {
	cluster, workload, output string
}

func newSimulateCommand() *cobra.Command {
	o := &simulateOptions{}
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "Replay a GPU workload on a simulated cluster with and without nicaffinity",
		Long: `Start an in-process control plane (kube-apiserver, etcd), simulated GPU
nodes with the real topology exporter, and the real scheduler; replay the same
workload through the nicaffinity profile and through the default scheduler,
and report what the jobs really got: the worst GPU-NIC level per RDMA job, the
share that can use GPUDirect RDMA, and time to Running.

Without --cluster and --workload it uses a default mix of real machines
(HGX H100, DGX A100, Azure NDv2, and a shape with NIC-less switches).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.OutOrStdout(), cmd.ErrOrStderr()) },
	}
	f := cmd.Flags()
	f.StringVar(&o.cluster, "cluster", "", "cluster spec YAML (pools of count x machine)")
	f.StringVar(&o.workload, "workload", "", "workload spec YAML (jobs, sizes, rdmaShare, interarrival, durations, seed)")
	f.StringVarP(&o.output, "output", "o", "text", "text or json")
	return cmd
}

func (o *simulateOptions) run(out, progress io.Writer) error {
	if o.output != "text" && o.output != "json" {
		return fmt.Errorf("--output %q: want text or json", o.output)
	}
	c, w := sim.DefaultCluster, sim.DefaultWorkload
	if o.cluster != "" {
		b, err := os.ReadFile(o.cluster)
		if err != nil {
			return err
		}
		if c, err = sim.ParseCluster(b); err != nil {
			return fmt.Errorf("%s: %w", o.cluster, err)
		}
	}
	if o.workload != "" {
		b, err := os.ReadFile(o.workload)
		if err != nil {
			return err
		}
		if w, err = sim.ParseWorkload(b); err != nil {
			return fmt.Errorf("%s: %w", o.workload, err)
		}
	}
	var results []sim.Result
	for _, scheduler := range []string{"nicaffinity-scheduler", "default-scheduler"} {
		start := time.Now()
		fmt.Fprintf(progress, "replaying %d jobs through %s...\n", w.Jobs, scheduler)
		r, err := sim.Run(cmdContext(), c, w, scheduler, progress)
		if err != nil {
			return fmt.Errorf("%s: %w", scheduler, err)
		}
		fmt.Fprintf(progress, "  done in %s\n", time.Since(start).Round(time.Second))
		results = append(results, r)
	}
	if o.output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	}
	sim.Format(out, results)
	return nil
}
