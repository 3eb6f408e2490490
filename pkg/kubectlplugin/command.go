package kubectlplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"

	"github.com/nicaffinity/nicaffinity/pkg/doctor"
	"github.com/nicaffinity/nicaffinity/pkg/version"
)

// Options hold the flags every subcommand shares.
type Options struct {
	Kubeconfig string
	// RESTConfig, when set, is used instead of the kubeconfig.
	RESTConfig *rest.Config
	Timeout    time.Duration
	Cluster    doctor.ClusterOptions
}

// NewCommand is kubectl-nicaffinity: kubectl runs it as `kubectl
// nicaffinity` once the binary is on PATH.
func NewCommand(o *Options) *cobra.Command {
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Second
	}
	if o.Cluster.GPUResource == "" {
		o.Cluster = doctor.DefaultClusterOptions()
	}
	root := &cobra.Command{
		Use:           "kubectl-nicaffinity",
		Short:         "A node's GPU-NIC matrix, and why a pod is (or is not) where it is",
		Version:       version.String(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster)")
	pf.DurationVar(&o.Timeout, "request-timeout", o.Timeout, "how long API reads may take")
	pf.StringVar(&o.Cluster.GPUResource, "gpu-resource", o.Cluster.GPUResource, "the GPU resource name")

	var output string
	topo := &cobra.Command{
		Use:   "topo NODE",
		Short: "Print a node's GPU-NIC matrix from its NodeResourceTopology, as nvidia-smi topo -m lays it out, with free and used GPUs",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("--output %q: want text or json", output)
			}
			return o.with(cmd, func(ctx context.Context, c doctor.Clients) error {
				obj, err := doctor.GetNRT(ctx, c.Dynamic, args[0])
				if err != nil {
					return err
				}
				m, err := BuildMatrix(obj, o.Cluster.GPUResource)
				if err != nil {
					return err
				}
				if output == "json" {
					return writeJSON(cmd.OutOrStdout(), m)
				}
				_, err = io.WriteString(cmd.OutOrStdout(), m.Format())
				return err
			})
		},
	}
	topo.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")

	var namespace, scheduler string
	why := &cobra.Command{
		Use:   "why POD",
		Short: "Explain a Pending pod (the scheduler's reasons, and per node what its object offers) or a placed one (plan against what it got, the NICs to use)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.with(cmd, func(ctx context.Context, c doctor.Clients) error {
				text, err := Why(ctx, c, namespace, args[0], o.Cluster, scheduler)
				if err != nil {
					return err
				}
				_, err = io.WriteString(cmd.OutOrStdout(), text)
				return err
			})
		},
	}
	why.Flags().StringVarP(&namespace, "namespace", "n", "default", "the pod's namespace")
	why.Flags().StringVar(&scheduler, "scheduler-name", "nicaffinity-scheduler", "nicaffinity's scheduler name")
	root.AddCommand(topo, why)
	return root
}

func (o *Options) with(cmd *cobra.Command, f func(context.Context, doctor.Clients) error) error {
	c, err := doctor.NewClients(o.RESTConfig, o.Kubeconfig, o.Timeout)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), o.Timeout)
	defer cancel()
	return f(ctx, c)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
