// Command nicaffinity is the user's command line: the GPU-NIC topology of a
// node as `nvidia-smi topo -m` prints it, from sysfs (+NVML), an NCCL
// topology XML, or a bundled real machine.
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
		Use:           "nicaffinity",
		Short:         "Place GPU pods next to their RDMA NICs",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newTopoCommand(), newSimulateCommand(), newBenchCommand())
	return root
}
