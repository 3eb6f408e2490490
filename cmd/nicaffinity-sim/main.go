// Command nicaffinity-sim runs nicaffinity against a simulated GPU
// cluster: `simulate` replays a workload through the real apiserver,
// scheduler and exporters in one process, with and without nicaffinity;
// `bench` measures the scheduler's throughput with and without it. It links
// the in-process control plane and is meant for laptops and CI, never for
// GPU nodes (the `nicaffinity` command is).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"k8s.io/klog/v2"

	"github.com/nicaffinity/nicaffinity/pkg/version"
)

func cmdContext() context.Context {
	ctx, _ := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	return ctx
}

func main() {
	// The in-process control plane logs a great deal; keep it quiet unless asked.
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	_ = fs.Set("v", "0")
	_ = fs.Set("logtostderr", "false")
	_ = fs.Set("stderrthreshold", "FATAL")
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "nicaffinity-sim",
		Short:         "Simulate a GPU cluster with and without nicaffinity, and measure its scheduler",
		SilenceUsage:  true,
		SilenceErrors: true,
		// The linked Kubernetes packages register their own --version on
		// the global flag set (component-base's verflag), so cobra's cannot
		// be used: answer it here with nicaffinity's release.
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f := cmd.Flags().Lookup("version"); f != nil && f.Changed {
				fmt.Fprintln(cmd.OutOrStdout(), "nicaffinity-sim version", version.String())
				return nil
			}
			return cmd.Help()
		},
	}
	root.AddCommand(newSimulateCommand(), newBenchCommand())
	return root
}
