package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/apis/config"
	"github.com/nicaffinity/nicaffinity/pkg/doctor"
	"github.com/nicaffinity/nicaffinity/pkg/topology/discovery"
	"github.com/nicaffinity/nicaffinity/pkg/topology/nvmlgpu"
)

// errFailed is returned after a report with a failure was printed, so the
// exit status says so.
var errFailed = errors.New("doctor found a failure (see above)")

type doctorOptions struct {
	output     string
	kubeconfig string
	// restConfig, when set, is used instead of the kubeconfig (tests).
	restConfig *rest.Config
	cluster    doctor.ClusterOptions
	timeout    time.Duration
}

func newDoctorCommand() *cobra.Command {
	o := &doctorOptions{cluster: doctor.DefaultClusterOptions()}
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check, bottom-up, why GPUDirect RDMA does or does not work",
		Long: `Run the GPUDirect RDMA checklist bottom-up and stop at the first layer that
fails, each failure with the one thing to do about it:

  doctor node        this host (or a sysfs tree): driver and devices, GPUDirect
                     (nvidia-peermem or dma-buf, ACS, IOMMU), ports and GIDs,
                     topology
  doctor cluster     the CRD, allocatable GPUs and RDMA, the exporter and each
                     node's object, the scheduler's leader
  doctor pod NAME    a pod's placement, its observed GPU-NIC levels, the
                     NCCL_IB_HCA to use, RoCE networking, IPC_LOCK
  doctor pair A B    the pair test between two nodes: pods, commands and the
                     pass mark (90% of line rate)

The exit status is 1 when a check failed.`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	pf.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then in-cluster)")
	pf.DurationVar(&o.timeout, "timeout", 30*time.Second, "how long API reads may take")
	cmd.AddCommand(o.nodeCommand(), o.clusterCommand(), o.podCommand(), o.pairCommand())
	return cmd
}

func (o *doctorOptions) print(w io.Writer, r doctor.Report) error {
	var err error
	switch o.output {
	case "json":
		err = r.WriteJSON(w)
	case "text":
		err = r.WriteText(w)
	default:
		return fmt.Errorf("--output %q: want text or json", o.output)
	}
	if err == nil && !r.OK() {
		err = errFailed
	}
	return err
}

func (o *doctorOptions) checkOutput() error {
	if o.output != "text" && o.output != "json" {
		return fmt.Errorf("--output %q: want text or json", o.output)
	}
	return nil
}

func (o *doctorOptions) nodeCommand() *cobra.Command {
	var sysfsRoot, devRoot, kernel, linkLayer, maxLevel, nvml string
	var keepGoing bool
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Check this host, or a sysfs tree, bottom-up",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.checkOutput(); err != nil {
				return err
			}
			level, err := annotations.ParseMaxLevel(maxLevel)
			if err != nil {
				return fmt.Errorf("--max-level: %w", err)
			}
			if linkLayer != "" && linkLayer != "InfiniBand" && linkLayer != "Ethernet" {
				return fmt.Errorf("--link-layer %q: want InfiniBand or Ethernet", linkLayer)
			}
			if err := discovery.ValidateNVMLMode(nvml); err != nil {
				return fmt.Errorf("--nvml: %w", err)
			}
			topo, err := discovery.Host{SysfsRoot: sysfsRoot, NVMLMode: nvml, NVML: nvmlgpu.New(), KernelRelease: kernel}.Discover()
			if err != nil {
				return err
			}
			opts := doctor.NodeOptions{Subject: "node (" + sysfsRoot + ")", LinkLayer: linkLayer, MaxLevel: level, KeepGoing: keepGoing}
			if devRoot != "" {
				opts.DevInfiniband = listDir(filepath.Join(devRoot, "infiniband"))
			}
			return o.print(cmd.OutOrStdout(), doctor.Node(topo, opts))
		},
	}
	f := cmd.Flags()
	f.StringVar(&sysfsRoot, "sysfs-root", "/sys", "read this directory as if it were /sys")
	f.StringVar(&devRoot, "dev-root", "", "read <dir>/infiniband as /dev/infiniband where sysfs cannot tell (default: none)")
	f.StringVar(&kernel, "kernel-release", "", "the kernel release of the host the tree is from (default: this kernel's, with --sysfs-root /sys)")
	f.StringVar(&linkLayer, "link-layer", "", "the link layer every NIC port should have: InfiniBand or Ethernet (default: any)")
	f.StringVar(&maxLevel, "max-level", config.DefaultMaxLevel, "the worst GPU-NIC level that counts as aligned")
	f.StringVar(&nvml, "nvml", "auto", "use NVML for GPU identity: auto, on or off")
	f.BoolVar(&keepGoing, "keep-going", false, "check every layer even after one failed (acceptance runs; later findings may follow from the first)")
	return cmd
}

// listDir lists a directory's names; nil when it cannot be read, empty
// when it is empty or absent.
func listDir(dir string) []string {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return []string{}
	}
	if err != nil {
		return nil
	}
	out := []string{}
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func (o *doctorOptions) clients() (doctor.Clients, error) {
	return doctor.NewClients(o.restConfig, o.kubeconfig, o.timeout)
}

// withClients runs f with API clients and a context bounded by --timeout.
func (o *doctorOptions) withClients(cmd *cobra.Command, f func(context.Context, doctor.Clients) error) error {
	c, err := o.clients()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
	defer cancel()
	return f(ctx, c)
}

func (o *doctorOptions) clusterFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.cluster.GPUResource, "gpu-resource", o.cluster.GPUResource, "the GPU resource name")
	f.StringSliceVar(&o.cluster.RDMAPrefixes, "rdma-prefix", o.cluster.RDMAPrefixes, "RDMA resource name prefixes")
	f.StringSliceVar(&o.cluster.SRIOV, "sriov-resource", o.cluster.SRIOV, "SR-IOV resource names")
	f.StringVar(&o.cluster.ExporterNamespace, "exporter-namespace", o.cluster.ExporterNamespace, "namespace of the exporter DaemonSet")
	f.StringVar(&o.cluster.ExporterName, "exporter-name", o.cluster.ExporterName, "name of the exporter DaemonSet")
	f.StringVar(&o.cluster.LeaseNamespace, "scheduler-namespace", o.cluster.LeaseNamespace, "namespace of the scheduler's leader lease")
	f.StringVar(&o.cluster.LeaseName, "scheduler-lease", o.cluster.LeaseName, "name of the scheduler's leader lease")
	f.DurationVar(&o.cluster.MaxAge, "max-age", o.cluster.MaxAge, "how old a node's object may be (the plugin's topologyMaxAge)")
}

func (o *doctorOptions) clusterCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Check the install, the nodes' resources and objects, and the scheduler",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.checkOutput(); err != nil {
				return err
			}
			return o.withClients(cmd, func(ctx context.Context, c doctor.Clients) error {
				s, err := doctor.GatherCluster(ctx, c, o.cluster)
				if err != nil {
					return err
				}
				return o.print(cmd.OutOrStdout(), doctor.Cluster(s, o.cluster))
			})
		},
	}
	o.clusterFlags(cmd)
	return cmd
}

func (o *doctorOptions) podCommand() *cobra.Command {
	var namespace, scheduler string
	cmd := &cobra.Command{
		Use:   "pod NAME",
		Short: "Check a pod: placement, observed levels, NCCL_IB_HCA, networking, IPC_LOCK",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.checkOutput(); err != nil {
				return err
			}
			return o.withClients(cmd, func(ctx context.Context, c doctor.Clients) error {
				s, err := doctor.GatherPod(ctx, c, namespace, args[0], scheduler)
				if err != nil {
					return err
				}
				return o.print(cmd.OutOrStdout(), doctor.Pod(s, o.cluster))
			})
		},
	}
	cmd.Flags().StringVarP(&namespace, "namespace", "n", "default", "the pod's namespace")
	cmd.Flags().StringVar(&scheduler, "scheduler-name", "nicaffinity-scheduler", "nicaffinity's scheduler name")
	o.clusterFlags(cmd)
	return cmd
}

func (o *doctorOptions) pairCommand() *cobra.Command {
	p := doctor.PairOptions{Namespace: "default", GIDIndex: 3, Image: "mellanox/cuda-perftest:latest", RDMAResource: "rdma/hca"}
	cmd := &cobra.Command{
		Use:   "pair NODE_A NODE_B",
		Short: "Write the pair test between two nodes: pods, commands and the 90% pass mark",
		Long: `Write the four-step pair test between two nodes: two pods pinned to them,
then devices (ibv_devinfo), addresses and GIDs (show_gids), an ib_send_bw
server on A and client on B, and the pass mark (90% of line rate).

Without --nic and --rate-gbps it reads node A's NodeResourceTopology for its
first ACTIVE NIC, its rate and its link layer (RoCE: hostNetwork and -x).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.checkOutput(); err != nil {
				return err
			}
			p.NodeA, p.NodeB = args[0], args[1]
			if p.NIC == "" || p.RateGbps == 0 {
				c, err := o.clients()
				if err != nil {
					return fmt.Errorf("give --nic and --rate-gbps, or a cluster to read them from: %w", err)
				}
				ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
				defer cancel()
				obj, err := doctor.GetNRT(ctx, c.Dynamic, p.NodeA)
				if err != nil {
					return fmt.Errorf("give --nic and --rate-gbps, or a cluster to read them from: %w", err)
				}
				nic, rate, roce, err := doctor.NICFromObject(obj)
				if err != nil {
					return err
				}
				if p.NIC == "" {
					p.NIC = nic
				}
				if p.RateGbps == 0 {
					p.RateGbps = rate
				}
				if !cmd.Flags().Changed("roce") {
					p.RoCE = roce
				}
			}
			r, err := doctor.Pair(p)
			if err != nil {
				return err
			}
			return o.print(cmd.OutOrStdout(), r)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&p.Namespace, "namespace", "n", p.Namespace, "namespace of the test pods")
	f.StringVar(&p.NIC, "nic", "", "the RDMA device to test (default: node A's first ACTIVE NIC)")
	f.Float64Var(&p.RateGbps, "rate-gbps", 0, "the NIC's line rate in Gb/s (default: from node A's object)")
	f.BoolVar(&p.RoCE, "roce", false, "RoCE: hostNetwork pods and ib_send_bw -x (default: from node A's object)")
	f.IntVar(&p.GIDIndex, "gid-index", p.GIDIndex, "the RoCE v2 GID index (show_gids)")
	f.StringVar(&p.Image, "image", p.Image, "an image with perftest (ib_send_bw), ibv_devinfo and show_gids")
	f.StringVar(&p.RDMAResource, "rdma-resource", p.RDMAResource, "the RDMA resource the test pods request")
	return cmd
}
