// Command topology-exporter runs on every GPU node (DaemonSet): it publishes
// the node's GPU-NIC topology and free devices as a NodeResourceTopology and
// checks what each pod really got.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/exporter"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/podresources"
	"github.com/nicaffinity/nicaffinity/pkg/topology/discovery"
	"github.com/nicaffinity/nicaffinity/pkg/version"
)

type options struct {
	nodeName       string
	sysfsRoot      string
	socket         string
	kubeconfig     string
	kubeletConfig  string
	oneshot        bool
	noPublish      bool
	resync         time.Duration
	syncTimeout    time.Duration
	minWrite       time.Duration
	metricsAddr    string
	gpuResource    string
	sriovResources []string
	rdmaPrefixes   []string
	maxLevel       string
	railSource     string
	rails          string
	nvml           string
	gomaxprocs     int
	out            io.Writer
}

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command { return commandFor(&options{out: os.Stdout}) }

func commandFor(o *options) *cobra.Command {
	def := exporter.DefaultConfig("")
	cmd := &cobra.Command{
		Version:       version.String(),
		Use:           "topology-exporter",
		Short:         "Publish this node's GPU-NIC topology as a NodeResourceTopology",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return o.run(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (env NODE_NAME)")
	f.StringVar(&o.sysfsRoot, "sysfs-root", "/sys", "the host's /sys as mounted in the container")
	f.StringVar(&o.socket, "podresources-socket", podresources.DefaultSocket, "the kubelet's podresources socket")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (in-cluster config when empty)")
	f.StringVar(&o.kubeletConfig, "kubelet-config", "/var/lib/kubelet/config.yaml", "kubelet configuration file to read the topology manager policy and scope from")
	f.BoolVar(&o.oneshot, "oneshot", false, "publish once and exit")
	f.BoolVar(&o.noPublish, "no-publish", false, "print the object as YAML and exit, without a cluster")
	f.DurationVar(&o.resync, "resync-period", def.ResyncPeriod, "re-read and re-publish at least this often")
	f.DurationVar(&o.syncTimeout, "sync-timeout", def.SyncTimeout, "give up a sync (discovery, podresources, apply, pod patches) after this long and retry")
	f.DurationVar(&o.minWrite, "min-write-interval", def.MinWriteInterval, "at most one write per interval")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "serve /metrics, /healthz and /readyz here (empty: off)")
	f.StringVar(&o.gpuResource, "gpu-resource", def.Resources.GPU, "the NVIDIA device plugin's resource name")
	f.StringSliceVar(&o.sriovResources, "sriov-resources", def.Resources.SRIOV, "SR-IOV device plugin resources (device IDs are VF PCI addresses)")
	f.StringSliceVar(&o.rdmaPrefixes, "rdma-prefixes", def.RDMAPrefixes, "resource name prefixes of shared RDMA resources")
	f.StringVar(&o.maxLevel, "max-level", def.MaxLevel.String(), "worst GPU-NIC level that counts as aligned")
	f.StringVar(&o.railSource, "rail-source", "", "where NIC rails come from besides --rails: subnet (the netdev's IPv4 subnet, /30 or wider; needs hostNetwork), pci-rank (rank by PCI address), or empty: none")
	f.StringVar(&o.rails, "rails", "", "rails by RDMA device, mlx5_0=0,mlx5_1=1,... (per node pool); wins over --rail-source")
	f.StringVar(&o.nvml, "nvml", discovery.NVMLAuto, "use NVML: auto, on, off")
	f.IntVar(&o.gomaxprocs, "gomaxprocs", 2, "cap on OS threads running Go code (0: Go's default)")
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	f.AddGoFlagSet(fs)
	return cmd
}

func (o *options) config() (exporter.Config, error) {
	cfg := exporter.DefaultConfig(o.nodeName)
	if o.nodeName == "" {
		return cfg, errors.New("--node-name (or NODE_NAME) is required")
	}
	if err := discovery.ValidateNVMLMode(o.nvml); err != nil {
		return cfg, fmt.Errorf("--nvml: %w", err)
	}
	l, err := annotations.ParseMaxLevel(o.maxLevel)
	if err != nil {
		return cfg, fmt.Errorf("--max-level: %w", err)
	}
	if o.resync <= 0 || o.minWrite <= 0 || o.syncTimeout <= 0 {
		return cfg, errors.New("--resync-period, --min-write-interval and --sync-timeout must be positive")
	}
	cfg.MaxLevel = l
	railMap, err := nrt.ParseRailMap(o.rails)
	if err != nil {
		return cfg, fmt.Errorf("--rails: %w", err)
	}
	cfg.Rails = nrt.Rails{Source: o.railSource, Map: railMap}
	if cfg.Rails.Source == "" && len(railMap) > 0 {
		cfg.Rails.Source = nrt.RailFromMap
	}
	if err := cfg.Rails.Validate(); err != nil {
		return cfg, fmt.Errorf("--rail-source: %w", err)
	}
	cfg.ResyncPeriod, cfg.MinWriteInterval, cfg.SyncTimeout = o.resync, o.minWrite, o.syncTimeout
	cfg.Resources.GPU, cfg.Resources.SRIOV, cfg.RDMAPrefixes = o.gpuResource, o.sriovResources, o.rdmaPrefixes
	cfg.TopologyManagerPolicy, cfg.TopologyManagerScope = kubeletTopologyManager(o.kubeletConfig)
	return cfg, nil
}

// maxKubeletConfig bounds the kubelet configuration file read (they are a
// few kB).
const maxKubeletConfig = 1 << 20

// kubeletTopologyManager reads the policy and scope from the kubelet
// configuration file; what cannot be read, or is no value the kubelet
// takes, is the kubelet's default, with a log line naming the file.
func kubeletTopologyManager(path string) (policy, scope string) {
	policy, scope = "none", "container"
	f, err := os.Open(path)
	if err != nil {
		klog.InfoS("Kubelet configuration not readable; assuming the default topology manager", "path", path, "err", err)
		return
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxKubeletConfig+1))
	if err == nil && len(b) > maxKubeletConfig {
		err = fmt.Errorf("larger than %d bytes", maxKubeletConfig)
	}
	var kc struct {
		TopologyManagerPolicy string `json:"topologyManagerPolicy"`
		TopologyManagerScope  string `json:"topologyManagerScope"`
	}
	if err == nil {
		err = yaml.Unmarshal(b, &kc)
	}
	if err != nil {
		klog.ErrorS(err, "Kubelet configuration not parseable; assuming the default topology manager", "path", path)
		return
	}
	switch kc.TopologyManagerPolicy {
	case "":
	case "none", "best-effort", "restricted", "single-numa-node":
		policy = kc.TopologyManagerPolicy
	default:
		klog.ErrorS(nil, "Unknown topologyManagerPolicy in the kubelet configuration; assuming none", "path", path, "value", kc.TopologyManagerPolicy)
	}
	switch kc.TopologyManagerScope {
	case "":
	case "container", "pod":
		scope = kc.TopologyManagerScope
	default:
		klog.ErrorS(nil, "Unknown topologyManagerScope in the kubelet configuration; assuming container", "path", path, "value", kc.TopologyManagerScope)
	}
	return
}

func (o *options) run(ctx context.Context) error {
	if o.gomaxprocs > 0 && os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(o.gomaxprocs)
	}
	cfg, err := o.config()
	if err != nil {
		return err
	}
	src, err := podresources.Dial(o.socket, 10*time.Second)
	if err != nil {
		return err
	}
	defer src.Close()
	// The container runs on the host's kernel, whatever root its /sys is mounted at.
	// The driver's procfs is the host's in a container too (/proc/driver
	// is not namespaced).
	disc := discovery.Host{SysfsRoot: o.sysfsRoot, NVMLMode: o.nvml, KernelRelease: discovery.RunningKernel(), NVIDIAProc: "/proc/driver/nvidia"}
	if o.noPublish {
		exp := exporter.New(cfg, disc, src, nil, nil, nil)
		obj, problems, _, err := exp.Build(ctx)
		if err != nil {
			return err
		}
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, "problem:", p)
		}
		out, err := yaml.Marshal(obj)
		if err != nil {
			return err
		}
		_, err = o.out.Write(out)
		return err
	}
	rc, err := restConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	client, err := exporter.NewClient(rc)
	if err != nil {
		return err
	}
	exp := exporter.New(cfg, disc, src, client, exporter.ApplyPublisher{Client: client}, nil)
	if o.oneshot {
		return exp.Sync(ctx)
	}
	if o.metricsAddr != "" {
		srv := &http.Server{Addr: o.metricsAddr, Handler: handler(exp), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				klog.ErrorS(err, "Metrics server stopped", "address", o.metricsAddr)
			}
		}()
		defer srv.Close()
	}
	klog.InfoS("Starting topology exporter", "node", cfg.NodeName, "sysfsRoot", o.sysfsRoot, "socket", o.socket,
		"gpuResource", cfg.Resources.GPU, "sriovResources", strings.Join(cfg.Resources.SRIOV, ","))
	return exp.Run(ctx)
}

func handler(exp *exporter.Exporter) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(exp.Metrics().Registry, promhttp.HandlerOpts{}))
	// Both fail once three resync periods pass without a successful sync:
	// the kubelet restarts a stuck exporter, and a node whose object is not
	// current shows as not ready.
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := exp.Healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	// Ready also needs the object to be nicaffinity's: while another writer
	// owns it, the body names that writer.
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := exp.Readiness(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return rest.InClusterConfig()
}
