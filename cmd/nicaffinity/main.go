// Command nicaffinity is the command line for GPU nodes and laptops: the
// GPU-NIC topology of a node as `nvidia-smi topo -m` prints it, from sysfs
// (+NVML), an NCCL topology XML, or a bundled real machine; and `doctor`,
// the bottom-up GPUDirect RDMA checklist (node, cluster, pod, pair). It
// links no control plane, only API clients; the simulator is
// `nicaffinity-sim`.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/nicaffinity/nicaffinity/pkg/version"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Version:       version.String(),
		Use:           "nicaffinity",
		Short:         "Place GPU pods next to their RDMA NICs",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newTopoCommand(), newDoctorCommand(), newDRACommand())
	return root
}
