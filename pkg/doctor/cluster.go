package doctor

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/nicaffinity/nicaffinity/pkg/apis/config"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
	"github.com/nicaffinity/nicaffinity/pkg/podgroupapi"
	podreq "github.com/nicaffinity/nicaffinity/pkg/request"
)

// Cluster layers.
const (
	LayerInstall   = "install"
	LayerResources = "resources"
	LayerExporter  = "exporter"
	LayerScheduler = "scheduler"
)

// ClusterState is what the cluster checks read, gathered by Gather.
type ClusterState struct {
	Now time.Time
	// CRD says whether the NodeResourceTopology API is served.
	CRD bool
	// PodGroupAPI says whether the apiserver serves PodGroups
	// (pkg/podgroupapi), which the scheduler needs to place gangs.
	PodGroupAPI bool
	// Nodes are the nodes with GPUs (allocatable GPU resource above 0).
	Nodes []corev1.Node
	// NRTs by node name; NRTErrors holds objects that could not be decoded.
	NRTs      map[string]*v1alpha2.NodeResourceTopology
	NRTErrors map[string]error
	// Exporter is the exporter's DaemonSet (nil: not found).
	Exporter *appsv1.DaemonSet
	// Lease is the scheduler's leader election lease (nil: not found).
	Lease *coordinationv1.Lease
}

// ClusterOptions name what to look for.
type ClusterOptions struct {
	GPUResource string
	// RDMAPrefixes and SRIOV name the NIC resources (rdma/, SR-IOV names).
	RDMAPrefixes []string
	SRIOV        []string
	// ExporterNamespace/Name and LeaseNamespace/Name locate the parts.
	ExporterNamespace, ExporterName string
	LeaseNamespace, LeaseName       string
	// MaxAge is how old an object's heartbeat may be (the plugin's
	// topologyMaxAge, 5m by default).
	MaxAge time.Duration
}

// DefaultClusterOptions are the names the manifests and chart install.
func DefaultClusterOptions() ClusterOptions {
	return ClusterOptions{
		GPUResource: config.DefaultGPUResourceName, RDMAPrefixes: config.DefaultRDMAResourcePrefixes(), SRIOV: config.DefaultSRIOVResourceNames(),
		ExporterNamespace: "nicaffinity-node", ExporterName: "topology-exporter",
		LeaseNamespace: "nicaffinity-system", LeaseName: "nicaffinity-scheduler",
		MaxAge: config.DefaultTopologyMaxAge,
	}
}

// RequestConfig reads pods as the plugin with its default level and policy
// does, with these resource names (pkg/request).
func (o ClusterOptions) RequestConfig() podreq.Config {
	c := podreq.Default(o.SRIOV)
	c.GPUResource, c.RDMAPrefixes = o.GPUResource, o.RDMAPrefixes
	return c
}

func (o ClusterOptions) isNIC(res corev1.ResourceName) bool {
	for _, p := range o.RDMAPrefixes {
		if strings.HasPrefix(string(res), p) {
			return true
		}
	}
	return slices.Contains(o.SRIOV, string(res))
}

// Cluster runs the cluster checklist.
func Cluster(s ClusterState, o ClusterOptions) Report {
	b := newBuilder("cluster")
	if b.startLayer(LayerInstall) {
		if s.CRD {
			b.pass("NodeResourceTopology CRD", "topology.node.k8s.io/v1alpha2 served")
		} else {
			b.fail("NodeResourceTopology CRD", "topology.node.k8s.io/v1alpha2 is not served", "install the CRD: helm install nicaffinity charts/nicaffinity, or kubectl apply -k manifests/crds")
		}
		if s.PodGroupAPI {
			b.pass("PodGroup API", podgroupapi.GroupVersion+" "+podgroupapi.Resource+" served: the scheduler places gangs whole")
		} else {
			b.warn("PodGroup API", podgroupapi.GroupVersion+" "+podgroupapi.Resource+" is not served: the scheduler runs without gangs, each pod of a job placed on its own",
				podgroupapi.Fix+" (docs/scheduler.md, Jobs)")
		}
	}
	if b.startLayer(LayerResources) {
		if len(s.Nodes) == 0 {
			b.fail("GPU nodes", "no node has allocatable "+o.GPUResource, "deploy the NVIDIA device plugin (GPU Operator) and check kubectl describe node <node> | grep -A8 Allocatable")
		}
		for _, n := range s.Nodes {
			gpus := n.Status.Allocatable[corev1.ResourceName(o.GPUResource)]
			var nics []string
			for res, q := range n.Status.Allocatable {
				if o.isNIC(res) && !q.IsZero() {
					nics = append(nics, fmt.Sprintf("%s %s", res, q.String()))
				}
			}
			slices.Sort(nics)
			if len(nics) == 0 {
				b.fail("node "+n.Name, fmt.Sprintf("%s GPUs, no allocatable RDMA resource", gpus.String()),
					"check the RDMA device plugin: NicClusterPolicy spec.rdmaSharedDevicePlugin (its resourceName and selectors), kubectl logs -n network-operator -l app=rdma-shared-dp, and that /dev/infiniband is not empty on the node (nicaffinity doctor node)")
				continue
			}
			b.pass("node "+n.Name, fmt.Sprintf("%s GPUs, %s", gpus.String(), strings.Join(nics, ", ")))
		}
	}
	if b.startLayer(LayerExporter) {
		switch ds := s.Exporter; {
		case ds == nil:
			b.fail("exporter DaemonSet", fmt.Sprintf("%s/%s not found", o.ExporterNamespace, o.ExporterName), "install nicaffinity (helm install, or kubectl apply -k manifests)")
		case ds.Status.DesiredNumberScheduled == 0:
			b.fail("exporter DaemonSet", "scheduled on no node", "its nodeSelector (nvidia.com/gpu.present=true) matches no node: label the GPU nodes or set the chart's exporter.nodeSelector")
		case ds.Status.NumberReady < ds.Status.DesiredNumberScheduled:
			b.fail("exporter DaemonSet", fmt.Sprintf("%d of %d pods ready", ds.Status.NumberReady, ds.Status.DesiredNumberScheduled),
				"kubectl -n "+o.ExporterNamespace+" get pods -l app.kubernetes.io/name=topology-exporter, then the logs of one not ready (its /readyz says why)")
		default:
			b.pass("exporter DaemonSet", fmt.Sprintf("%d of %d pods ready", ds.Status.NumberReady, ds.Status.DesiredNumberScheduled))
		}
		for _, n := range s.Nodes {
			nodeObject(b, n.Name, s, o)
		}
		railsCheck(b, s)
	}
	if b.startLayer(LayerScheduler) {
		l := s.Lease
		switch {
		case l == nil:
			b.fail("scheduler leader", fmt.Sprintf("no lease %s/%s", o.LeaseNamespace, o.LeaseName), "the nicaffinity scheduler is not running: kubectl -n "+o.LeaseNamespace+" get deploy,pods")
		case l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "":
			b.fail("scheduler leader", "the lease has no holder", "kubectl -n "+o.LeaseNamespace+" logs deploy/nicaffinity-scheduler")
		default:
			d := 15 * time.Second
			if l.Spec.LeaseDurationSeconds != nil {
				d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
			}
			if l.Spec.RenewTime == nil || s.Now.Sub(l.Spec.RenewTime.Time) > 2*d {
				b.fail("scheduler leader", fmt.Sprintf("%s holds the lease but has not renewed it", *l.Spec.HolderIdentity), "kubectl -n "+o.LeaseNamespace+" logs deploy/nicaffinity-scheduler")
			} else {
				b.pass("scheduler leader", *l.Spec.HolderIdentity)
			}
		}
	}
	return b.report()
}

func nodeObject(b *builder, node string, s ClusterState, o ClusterOptions) {
	name := "object of " + node
	if err := s.NRTErrors[node]; err != nil {
		b.fail(name, "cannot be read: "+err.Error(), "delete it; the node's exporter writes it again")
		return
	}
	obj := s.NRTs[node]
	if obj == nil {
		b.fail(name, "no NodeResourceTopology", "the node's exporter has not written it: kubectl -n "+o.ExporterNamespace+" logs <exporter pod on "+node+">")
		return
	}
	if others := nrt.OtherManagers(obj); len(others) > 0 && !ownedByExporter(obj) {
		b.fail(name, "written by "+nrt.QuoteManagers(others)+", not by nicaffinity's exporter", "another topology updater (NFD, RTE) owns this node's object: see docs/nrt-schema.md, Coexistence")
		return
	}
	c, err := nrt.Compile(obj, o.GPUResource)
	if err != nil {
		b.fail(name, "cannot be used: "+err.Error(), "the exporter's logs on "+node+" say why")
		return
	}
	if c.Heartbeat.IsZero() {
		b.warn(name, "no heartbeat attribute", "upgrade the node's exporter")
		return
	}
	if age := s.Now.Sub(c.Heartbeat); o.MaxAge > 0 && age > o.MaxAge {
		b.fail(name, fmt.Sprintf("stale: last written %s ago (max %s)", age.Round(time.Second), o.MaxAge), "the node's exporter stopped writing: its pod's logs and /readyz")
		return
	}
	detail := fmt.Sprintf("fresh, %d GPUs (%d free), %d NICs up", len(c.GPUs), c.Free.Count(), len(c.NICs))
	if c.HostBlock != "" {
		b.fail(name, detail+"; GPUDirect RDMA cannot run: "+c.HostBlock, "nicaffinity doctor node on "+node)
		return
	}
	b.pass(name, detail)
}

func ownedByExporter(obj *v1alpha2.NodeResourceTopology) bool {
	for _, m := range obj.ManagedFields {
		if m.Manager == nrt.ExporterFieldManager {
			return true
		}
	}
	return false
}
