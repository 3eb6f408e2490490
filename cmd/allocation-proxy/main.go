// Command allocation-proxy runs on every GPU node (DaemonSet) between the
// kubelet and the vendor device plugins (the NVIDIA device plugin, the
// SR-IOV network device plugin): the kubelet's GetPreferredAllocation gets
// the devices nicaffinity's scheduler planned for the pod being admitted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/nicaffinity/nicaffinity/pkg/allocproxy"
	"github.com/nicaffinity/nicaffinity/pkg/apis/config"
	"github.com/nicaffinity/nicaffinity/pkg/podresources"
	"github.com/nicaffinity/nicaffinity/pkg/topology/sysfs"
	"github.com/nicaffinity/nicaffinity/pkg/version"
)

type options struct {
	nodeName, kubeconfig, kubeletDir, vendorDir, sysfsRoot, socket, metricsAddr string
	gpuResource                                                                 string
	sriovResources                                                              []string
	timeout, callTimeout                                                        time.Duration
	maxFronts                                                                   int
}

func main() {
	if err := newCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func newCommand() *cobra.Command { return commandFor(&options{}) }

func commandFor(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Version:       version.String(),
		Use:           "allocation-proxy",
		Short:         "Hand the kubelet the GPUs and VFs nicaffinity planned, in front of the vendor device plugins",
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
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (in-cluster config when empty)")
	f.StringVar(&o.kubeletDir, "kubelet-dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin directory")
	f.StringVar(&o.vendorDir, "vendor-dir", "/var/lib/nicaffinity/device-plugins", "the directory the vendor plugins use as their device-plugin directory")
	f.StringVar(&o.sysfsRoot, "sysfs-root", "/sys", "the host's /sys as mounted (to map VFs to their NICs)")
	f.StringVar(&o.socket, "podresources-socket", podresources.DefaultSocket, "the kubelet's podresources socket (which pods hold devices)")
	f.StringVar(&o.metricsAddr, "metrics-bind-address", ":8081", "serve /metrics and /healthz here (empty: off)")
	f.StringVar(&o.gpuResource, "gpu-resource", config.DefaultGPUResourceName, "the NVIDIA device plugin's resource")
	f.StringSliceVar(&o.sriovResources, "sriov-resources", config.DefaultSRIOVResourceNames(), "SR-IOV device plugin resources (device IDs are VF PCI addresses)")
	f.DurationVar(&o.timeout, "timeout", 2*time.Second, "longest a preferred allocation may take before the kubelet chooses alone")
	f.DurationVar(&o.callTimeout, "call-timeout", 30*time.Second, "longest any other call forwarded to a device plugin may take (Allocate, PreStartContainer, options, the first device list)")
	f.IntVar(&o.maxFronts, "max-fronts", allocproxy.DefaultMaxFronts, "most resources the proxy fronts; further registrations are refused")
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	f.AddGoFlagSet(fs)
	return cmd
}

func (o *options) config() (allocproxy.Config, error) {
	if o.nodeName == "" {
		return allocproxy.Config{}, errors.New("--node-name (or NODE_NAME) is required")
	}
	if o.timeout <= 0 || o.callTimeout <= 0 || o.maxFronts <= 0 {
		return allocproxy.Config{}, errors.New("--timeout, --call-timeout and --max-fronts must be positive")
	}
	if o.kubeletDir == o.vendorDir {
		return allocproxy.Config{}, errors.New("--vendor-dir must not be the kubelet's directory: the vendor plugins would register with the kubelet directly")
	}
	kinds := map[string]allocproxy.Kind{o.gpuResource: allocproxy.KindGPU}
	for _, r := range o.sriovResources {
		if r == o.gpuResource {
			return allocproxy.Config{}, fmt.Errorf("--sriov-resources names the GPU resource %s", r)
		}
		kinds[r] = allocproxy.KindVF
	}
	return allocproxy.Config{KubeletDir: o.kubeletDir, VendorDir: o.vendorDir, Kinds: kinds, Timeout: o.timeout,
		CallTimeout: o.callTimeout, MaxFronts: o.maxFronts, NodeName: o.nodeName}, nil
}

func (o *options) run(ctx context.Context) error {
	cfg, err := o.config()
	if err != nil {
		return err
	}
	if topo, err := sysfs.New(sysfs.WithRoot(o.sysfsRoot)).Discover(); err != nil {
		klog.ErrorS(err, "Reading the node's NICs; VF plans cannot be followed", "sysfsRoot", o.sysfsRoot)
	} else {
		cfg.SetNICs(topo)
	}
	rc, err := restConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	kube, err := typedcorev1.NewForConfig(rc)
	if err != nil {
		return err
	}
	src, err := podresources.Dial(o.socket, cfg.Timeout)
	if err != nil {
		return err
	}
	defer src.Close()

	scheme := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(scheme))
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme, corev1.EventSource{Component: "nicaffinity-allocation-proxy", Host: o.nodeName})

	selector := fields.OneTermEqualSelector("spec.nodeName", o.nodeName).String()
	informer := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, lo metav1.ListOptions) (runtime.Object, error) {
			lo.FieldSelector = selector
			return kube.Pods(metav1.NamespaceAll).List(ctx, lo)
		},
		WatchFuncWithContext: func(ctx context.Context, lo metav1.ListOptions) (watch.Interface, error) {
			lo.FieldSelector = selector
			return kube.Pods(metav1.NamespaceAll).Watch(ctx, lo)
		},
	}, kube), &corev1.Pod{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	orders := allocproxy.NewBindingOrders(o.nodeName)
	if _, err := informer.AddEventHandler(orders.Handler()); err != nil {
		return err
	}
	go informer.RunWithContext(ctx)

	proxy := allocproxy.New(cfg, allocproxy.PodPlans{Node: o.nodeName, Lister: corelisters.NewPodLister(informer.GetIndexer()), Orders: orders},
		allocproxy.PodResourcesHeld{Source: src}, recorder, nil)
	if o.metricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(proxy.Metrics().Registry, promhttp.HandlerOpts{}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		srv := &http.Server{Addr: o.metricsAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				klog.ErrorS(err, "Metrics server stopped", "address", o.metricsAddr)
			}
		}()
		defer srv.Close()
	}
	klog.InfoS("Starting the allocation proxy", "node", o.nodeName, "kubeletDir", o.kubeletDir, "vendorDir", o.vendorDir,
		"gpuResource", o.gpuResource, "sriovResources", strings.Join(o.sriovResources, ","), "vfs", len(cfg.VFPF))
	return proxy.Run(ctx)
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	return rest.InClusterConfig()
}
