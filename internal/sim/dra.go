package sim

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/controller/resourceclaim"

	"github.com/nicaffinity/nicaffinity/internal/controlplane"
	"github.com/nicaffinity/nicaffinity/internal/drasim"
	"github.com/nicaffinity/nicaffinity/internal/kubeletsim"
	"github.com/nicaffinity/nicaffinity/pkg/dra"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// How a DRA column's jobs claim their devices. A job without a NIC claims
// GPUs alone: any, or (generated) those without an aligned NIC first.
const (
	// ClaimsGenerated: nicaffinity's templates for the cluster's machines
	// with shared NICs (dra.BuildClaimsFor, MethodSelector): GPUs that
	// have an aligned NIC, chosen by their bus IDs, and every NIC; for a
	// job without a NIC, GPUs without an aligned NIC first.
	ClaimsGenerated = "generated"
	// ClaimsPCIeRoot: a GPU-NIC pair per GPU matched on pcieRoot, as the
	// drivers' documentation suggests for alignment.
	ClaimsPCIeRoot = "pcieRoot"
	// ClaimsUnconstrained: N GPUs and one NIC, nothing matched.
	ClaimsUnconstrained = "unconstrained"
)

// DRAColumns are the runs of a DRA cluster: no device plugins, the GPU and
// NIC drivers' stand-ins publish ResourceSlices (NICs shared between
// claims, as the RDMA shared device plugin shares them), the scheduler's
// DynamicResources plugin allocates every device, and jobs differ only in
// their claims. NICAffinity's plugin leaves DRA pods to DynamicResources, so
// the nicaffinity-scheduler column differs from the others by its claims
// alone. The unconstrained column, on the default scheduler, is last: the
// report compares the others with it.
var DRAColumns = []Column{
	{Name: "dra generated", Scheduler: Schedulers[0], Kubelet: kubeletsim.DRA, Claims: ClaimsGenerated},
	{Name: "dra pcieRoot", Scheduler: Schedulers[1], Kubelet: kubeletsim.DRA, Claims: ClaimsPCIeRoot},
	{Name: "dra unconstrained", Scheduler: Schedulers[1], Kubelet: kubeletsim.DRA, Claims: ClaimsUnconstrained},
}

// SysfsPools is c without the pools of NCCL topologies and profiles, which
// name no PCIe root complexes, and the names of those left out.
func SysfsPools(c ClusterSpec) (ClusterSpec, []string) {
	var out ClusterSpec
	var left []string
	for _, p := range c.Pools {
		if p.NCCLXML != "" || strings.HasPrefix(p.Machine, "profile/") {
			left = append(left, p.Name)
			continue
		}
		out.Pools = append(out.Pools, p)
	}
	return out, left
}

// templateName is the ResourceClaimTemplate a job of gpus GPUs uses.
func templateName(gpus int, rdma bool) string {
	if rdma {
		return "gpus-" + strconv.Itoa(gpus) + "-with-nics"
	}
	return "gpus-" + strconv.Itoa(gpus)
}

// claimSpecs are a DRA column's templates, by name, for the job sizes the
// workload draws. Errors name the pool or the size that cannot be claimed.
func (p *Plan) claimSpecs(col Column) (map[string]resourcev1.ResourceClaimSpec, error) {
	for i, m := range p.machines {
		if m.Topology.Source != "sysfs" {
			return nil, fmt.Errorf("pool %s: DRA columns need machines read from sysfs: %s comes from %s, which names no PCIe root complexes (a DRA driver publishes the real ones)",
				p.Cluster.Pools[i].Name, m.Name, m.Topology.Source)
		}
	}
	out := map[string]resourcev1.ResourceClaimSpec{}
	for _, size := range slices.Sorted(maps.Keys(p.Workload.Sizes)) {
		if p.Workload.Sizes[size] == 0 {
			continue
		}
		gpus := resourcev1.ExactDeviceRequest{DeviceClassName: dra.GPUClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: int64(size)}
		plain := resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpus", Exactly: &gpus}}}}
		if col.Claims == ClaimsGenerated {
			c, err := dra.BuildClaimsFor(p.machines, dra.ClaimOptions{GPUs: size, MaxLevel: topology.LevelPXB, NoNIC: true})
			if err != nil {
				return nil, fmt.Errorf("column %s, jobs of %d GPUs without a NIC: %w", col.Name, size, err)
			}
			plain = c.Template.Spec.Spec
		}
		out[templateName(size, false)] = plain
		if p.Workload.RDMAShare == 0 {
			continue
		}
		o := dra.ClaimOptions{GPUs: size, GPUsPerNIC: 1, MaxLevel: topology.LevelPXB, SharedNICs: true}
		var spec resourcev1.ResourceClaimSpec
		switch col.Claims {
		case ClaimsGenerated:
			c, err := dra.BuildClaimsFor(p.machines, o)
			if err != nil {
				return nil, fmt.Errorf("column %s, jobs of %d GPUs with a NIC: %w", col.Name, size, err)
			}
			spec = c.Template.Spec.Spec
		case ClaimsPCIeRoot:
			spec = dra.PairSpec(o, nil)
		case ClaimsUnconstrained:
			nic := resourcev1.ExactDeviceRequest{DeviceClassName: dra.NICClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}
			spec = resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpus", Exactly: gpus.DeepCopy()}}}}
			spec.Devices.Requests = append(spec.Devices.Requests, resourcev1.DeviceRequest{Name: "nic", Exactly: &nic})
		default:
			return nil, fmt.Errorf("column %s: claims %q: want %s, %s or %s", col.Name, col.Claims, ClaimsGenerated, ClaimsPCIeRoot, ClaimsUnconstrained)
		}
		out[templateName(size, true)] = spec
	}
	return out, nil
}

// CheckColumns refuses, before anything runs, columns the plan's cluster
// or workload cannot run.
func CheckColumns(p *Plan, cols []Column) error {
	for _, c := range cols {
		if c.Kubelet == kubeletsim.DRA {
			if _, err := p.claimSpecs(c); err != nil {
				return err
			}
		}
	}
	return nil
}

// startDRA readies a DRA column's control plane: the drivers' DeviceClasses,
// the column's templates, and the real ResourceClaim controller, which
// makes each pod's claim from its template and deallocates and deletes it
// when the pod is gone (the kubelets publish their ResourceSlices).
func startDRA(ctx context.Context, cp *controlplane.ControlPlane, p *Plan, col Column) error {
	specs, err := p.claimSpecs(col)
	if err != nil {
		return err
	}
	res := cp.Kube.ResourceV1()
	for _, dc := range drasim.DeviceClasses() {
		if _, err := res.DeviceClasses().Create(ctx, &dc, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(specs)) {
		t := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: resourcev1.ResourceClaimTemplateSpec{Spec: specs[name]}}
		if _, err := res.ResourceClaimTemplates("default").Create(ctx, t, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("template %s: %w", name, err)
		}
	}
	factory := informers.NewSharedInformerFactory(cp.Kube, 0)
	ctrl, err := resourceclaim.NewController(klog.FromContext(ctx), cp.Kube, factory.Core().V1().Pods(), factory.Scheduling().V1beta1().PodGroups(),
		factory.Resource().V1().ResourceClaims(), factory.Resource().V1().ResourceClaimTemplates())
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	go ctrl.Run(ctx, 4)
	return nil
}

// draPod is a DRA job's pod: its template's claim, no extended resources.
func draPod(r *record, name, scheduler string) *corev1.Pod {
	tmpl := templateName(r.GPUs, r.RDMA)
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{SchedulerName: scheduler,
			ResourceClaims: []corev1.PodResourceClaim{{Name: "devices", ResourceClaimTemplateName: &tmpl}},
			Containers: []corev1.Container{{Name: "train", Image: "train",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "devices"}}}}}}}
}
