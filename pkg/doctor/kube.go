package doctor

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nicaffinity/nicaffinity/pkg/nccllog"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/podgroupapi"
)

// nrtResource is the NodeResourceTopology API.
var nrtResource = v1alpha2.SchemeGroupVersion.WithResource("noderesourcetopologies")

// Clients are the API clients the cluster and pod checks read through.
type Clients struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
}

// NewClients builds the clients from cfg, or when cfg is nil from a
// kubeconfig: path, else $KUBECONFIG, ~/.kube/config, then in-cluster.
// Every request is bounded by timeout.
func NewClients(cfg *rest.Config, kubeconfig string, timeout time.Duration) (Clients, error) {
	if cfg == nil {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = kubeconfig
		var err error
		if cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig(); err != nil {
			if clientcmd.IsEmptyConfig(err) {
				// client-go's own message suggests KUBERNETES_MASTER, which
				// nothing here reads: name what was looked for instead.
				where := rules.GetLoadingPrecedence()
				if kubeconfig != "" {
					where = []string{kubeconfig}
				}
				return Clients{}, fmt.Errorf("no kubeconfig: none at %s, and not running in a pod (pass --kubeconfig or set KUBECONFIG)", strings.Join(where, ", "))
			}
			return Clients{}, fmt.Errorf("kubeconfig: %w", err)
		}
	}
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = timeout
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return Clients{}, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return Clients{}, err
	}
	return Clients{Kube: kube, Dynamic: dyn}, nil
}

// GatherCluster reads what Cluster checks. Objects that are absent are
// left nil (the checks say so); other API errors are returned.
func GatherCluster(ctx context.Context, c Clients, o ClusterOptions) (ClusterState, error) {
	s := ClusterState{Now: time.Now(), NRTs: map[string]*v1alpha2.NodeResourceTopology{}, NRTErrors: map[string]error{}}
	if _, err := c.Kube.Discovery().ServerResourcesForGroupVersion(v1alpha2.SchemeGroupVersion.String()); err == nil {
		s.CRD = true
	} else if !apierrors.IsNotFound(err) {
		return s, fmt.Errorf("asking the apiserver for %s: %w", v1alpha2.SchemeGroupVersion, err)
	}
	served, err := podgroupapi.Served(c.Kube.Discovery())
	if err != nil {
		return s, err
	}
	s.PodGroupAPI = served
	nodes, err := c.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, fmt.Errorf("listing nodes: %w", err)
	}
	for _, n := range nodes.Items {
		if q, ok := n.Status.Allocatable[corev1.ResourceName(o.GPUResource)]; ok && !q.IsZero() {
			s.Nodes = append(s.Nodes, n)
		}
	}
	if s.CRD {
		for _, n := range s.Nodes {
			obj, err := GetNRT(ctx, c.Dynamic, n.Name)
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				s.NRTErrors[n.Name] = err
			default:
				s.NRTs[n.Name] = obj
			}
		}
	}
	ds, err := c.Kube.AppsV1().DaemonSets(o.ExporterNamespace).Get(ctx, o.ExporterName, metav1.GetOptions{})
	switch {
	case err == nil:
		s.Exporter = ds
	case !apierrors.IsNotFound(err):
		return s, fmt.Errorf("reading DaemonSet %s/%s: %w", o.ExporterNamespace, o.ExporterName, err)
	}
	lease, err := c.Kube.CoordinationV1().Leases(o.LeaseNamespace).Get(ctx, o.LeaseName, metav1.GetOptions{})
	switch {
	case err == nil:
		s.Lease = lease
	case !apierrors.IsNotFound(err):
		return s, fmt.Errorf("reading Lease %s/%s: %w", o.LeaseNamespace, o.LeaseName, err)
	}
	return s, nil
}

// GatherPod reads a pod and its node's object.
func GatherPod(ctx context.Context, c Clients, namespace, name, schedulerName string) (PodState, error) {
	p, err := c.Kube.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return PodState{}, fmt.Errorf("pod %s/%s: %w", namespace, name, err)
	}
	s := PodState{Pod: p, SchedulerName: schedulerName}
	if p.Spec.NodeName != "" {
		obj, err := GetNRT(ctx, c.Dynamic, p.Spec.NodeName)
		if err == nil {
			s.NRT = obj
		}
		s.NCCL = ncclLogs(ctx, c, p)
	}
	return s, nil
}

// ncclLogs reads what NCCL said in each started container's log: the
// first nccllog.MaxBytes, where NCCL's init lines are. A log that cannot be
// read is left out.
func ncclLogs(ctx context.Context, c Clients, p *corev1.Pod) map[string]nccllog.Report {
	out := map[string]nccllog.Report{}
	limit := int64(nccllog.MaxBytes)
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running == nil && cs.State.Terminated == nil {
			continue
		}
		rc, err := c.Kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: cs.Name, LimitBytes: &limit}).Stream(ctx)
		if err != nil {
			continue
		}
		r, err := nccllog.Parse(rc)
		_ = rc.Close()
		if err == nil {
			out[cs.Name] = r
		}
	}
	return out
}

// GetNRT reads one node's object through the checks Decode makes of
// outside data.
func GetNRT(ctx context.Context, dyn dynamic.Interface, node string) (*v1alpha2.NodeResourceTopology, error) {
	u, err := dyn.Resource(nrtResource).Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	obj, err := nrt.Decode(u)
	if err != nil {
		return nil, fmt.Errorf("NodeResourceTopology %s: %w", node, err)
	}
	return obj, nil
}
