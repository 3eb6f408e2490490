package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/nicaffinity/nicaffinity/internal/sim"
)

type simulateOptions struct {
	cluster, workload, output, report string
}

func newSimulateCommand() *cobra.Command {
	o := &simulateOptions{}
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "Replay a GPU workload on a simulated cluster with and without nicaffinity",
		Long: `Start an in-process control plane (kube-apiserver, etcd), simulated GPU
nodes with the real topology exporter, and the real scheduler; replay the same
workload through the nicaffinity profile and through the default scheduler,
each on a fresh cluster, and report what the jobs really got: the levels of
the GPU-NIC pairs the kubelet handed out, the share of RDMA jobs that can use
GPUDirect RDMA next to the offline bound (the best any placement could do),
aligned capacity left idle while RDMA jobs waited, and latencies.

Without --cluster and --workload it uses a default mix of real machines
(HGX H100, DGX A100, Azure NDv2, a shape with NIC-less switches, an H20 with
SR-IOV VFs) and a workload whose GPU load rises from 30% to 90%.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmdContext(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.cluster, "cluster", "", "cluster spec YAML (pools of count x machine, ncclXML or sysfs)")
	f.StringVar(&o.workload, "workload", "", "workload spec YAML (jobs, sizes, rdmaShare, vfShare, load, durations, seed)")
	f.StringVarP(&o.output, "output", "o", "text", "text or json")
	f.StringVar(&o.report, "report", "", "also write an HTML report with charts into this directory")
	return cmd
}

func (o *simulateOptions) specs() (sim.ClusterSpec, sim.WorkloadSpec, error) {
	c, w := sim.DefaultCluster, sim.DefaultWorkload
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
	return c, w, nil
}

func (o *simulateOptions) run(ctx context.Context, out, progress io.Writer) error {
	if o.output != "text" && o.output != "json" {
		return fmt.Errorf("--output %q: want text or json", o.output)
	}
	c, w, err := o.specs()
	if err != nil {
		return err
	}
	plan, err := sim.Prepare(c, w)
	if err != nil {
		return err
	}
	rep := sim.NewReport(plan)
	show := newProgressPrinter(progress)
	for _, col := range sim.Columns {
		start := time.Now()
		fmt.Fprintf(progress, "replaying %d jobs through %s on a fresh cluster of %d nodes...\n", plan.Jobs(), col.Name, rep.Nodes)
		r, err := sim.Run(ctx, plan, col, show.show)
		show.done()
		if err != nil {
			return fmt.Errorf("%s: %w", col.Name, err)
		}
		fmt.Fprintf(progress, "  done in %s\n", time.Since(start).Round(time.Second))
		rep.Results = append(rep.Results, r)
	}
	if o.report != "" {
		path, err := rep.WriteHTML(o.report)
		if err != nil {
			return fmt.Errorf("--report %s: %w", o.report, err)
		}
		fmt.Fprintf(progress, "report: %s\n", path)
	}
	if o.output == "json" {
		return rep.JSON(out)
	}
	rep.Format(out)
	return nil
}

// progressPrinter redraws one status line on a terminal, and prints a line
// every five seconds elsewhere (CI logs).
type progressPrinter struct {
	w     io.Writer
	tty   bool
	last  time.Time
	drawn bool
}

func newProgressPrinter(w io.Writer) *progressPrinter {
	p := &progressPrinter{w: w}
	if f, ok := w.(*os.File); ok {
		p.tty = term.IsTerminal(int(f.Fd()))
	}
	return p
}

func (p *progressPrinter) show(s sim.Progress) {
	line := fmt.Sprintf("  %3.0fs  submitted %d/%d  waiting %d  running %d  finished %d",
		s.Elapsed.Seconds(), s.Submitted, s.Jobs, s.Waiting, s.Running, s.Ended)
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		p.drawn = true
		return
	}
	if time.Since(p.last) >= 5*time.Second {
		fmt.Fprintln(p.w, line)
		p.last = time.Now()
	}
}

func (p *progressPrinter) done() {
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
	p.last = time.Time{}
}
