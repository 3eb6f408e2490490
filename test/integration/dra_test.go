package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/utils/ptr"

	"github.com/nicaffinity/nicaffinity/internal/cluster"
	"github.com/nicaffinity/nicaffinity/internal/drasim"
	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/dra"
	"github.com/nicaffinity/nicaffinity/pkg/machines"
	"github.com/nicaffinity/nicaffinity/pkg/topology"
)

// TestE2EDRA: stand-ins of the NVIDIA GPU DRA driver and dranet publish the
// GPUs and NICs of two machines as ResourceSlices (the drivers' attribute
// names); the real scheduler's DynamicResources plugin allocates claims
// made from nicaffinity's generated templates; the real exporter audits the
// allocations and publishes the observed levels, Events and metrics as for
// device-plugin pods:
//   - on the HGX H100 shape every pcieRoot allocation is at PIX or PXB;
//   - on the half-NIC shape a pcieRoot-only template gets PHB: Misaligned;
//   - the derived-attribute template (DRADerivedAttributes on) gets PIX.
func TestE2EDRA(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.DRADerivedAttributes, true)
	e := startEnv(t,
		cluster.NodeSpec{Name: "hgx", Machine: machines.HGXH100},
		cluster.NodeSpec{Name: "half", Machine: machines.HalfNICs})
	ctx := context.Background()
	res := e.cp.Kube.ResourceV1()
	for _, dc := range drasim.DeviceClasses() {
		if _, err := res.DeviceClasses().Create(ctx, &dc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"hgx", "half"} {
		for _, s := range drasim.Slices(name, e.cl.Nodes[name].Topology) {
			if _, err := res.ResourceSlices().Create(ctx, &s, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}

	// HGX H100: pcieRoot is enough; four pods of two GPUs, each with its NIC.
	hgx, err := dra.BuildClaims("hgx", e.cl.Nodes["hgx"].Topology, dra.ClaimOptions{Name: "pairs", Namespace: "default", GPUs: 2, GPUsPerNIC: 1, MaxLevel: topology.LevelPXB})
	if err != nil {
		t.Fatal(err)
	}
	if hgx.Method != dra.MethodPCIeRoot {
		t.Fatalf("HGX H100 template aligns by %s, want pcieRoot", hgx.Method)
	}
	for i := range 4 {
		e.runDRAPod(t, fmt.Sprintf("hgx-%d", i), "hgx", hgx.Template.Spec.Spec)
	}
	for i := range 4 {
		o := e.waitObservedDRA(t, fmt.Sprintf("hgx-%d", i))
		if !o.Aligned || (o.Level != "PIX" && o.Level != "PXB") || len(o.GPUs) != 2 || len(o.NICs) != 2 {
			t.Errorf("hgx-%d observed %+v: want 2 GPUs with 2 NICs at PIX or PXB", i, o)
		}
	}

	// Half-NIC: the same request with pcieRoot only gets a pair past PXB.
	derived, err := dra.BuildClaims("half", e.cl.Nodes["half"].Topology, dra.ClaimOptions{Name: "pair", Namespace: "default", GPUs: 2, GPUsPerNIC: 2, MaxLevel: topology.LevelPXB, Derived: true})
	if err != nil {
		t.Fatal(err)
	}
	if derived.Method != dra.MethodDerived {
		t.Fatalf("half-NIC template aligns by %s, want derived", derived.Method)
	}
	rootOnly := *derived.Template.Spec.Spec.DeepCopy()
	for i := range rootOnly.Devices.Requests {
		rootOnly.Devices.Requests[i].Exactly.DerivedAttributes = nil
	}
	for i := range rootOnly.Devices.Constraints {
		rootOnly.Devices.Constraints[i].MatchAttribute = ptr.To(resourcev1.FullyQualifiedName(dra.AttrPCIeRoot))
	}
	e.runDRAPod(t, "root-only", "half", rootOnly)
	o := e.waitObservedDRA(t, "root-only")
	if o.Aligned || o.Level != "PHB" {
		t.Errorf("pcieRoot-only claim on the half-NIC shape observed %+v: want PHB, not aligned", o)
	}
	e.waitEvent(t, "root-only", "Misaligned")
	e.deletePod(t, "root-only")

	// The derived template, on the same node, is aligned.
	e.runDRAPod(t, "derived", "half", derived.Template.Spec.Spec)
	o = e.waitObservedDRA(t, "derived")
	if !o.Aligned || o.Level != "PIX" || len(o.NICs) != 1 {
		t.Errorf("derived-attribute claim observed %+v: want aligned at PIX with one NIC", o)
	}
	e.waitEvent(t, "derived", "Aligned")
}

// runDRAPod creates a claim with spec and a pod that uses it, pinned to
// node, for the nicaffinity scheduler (whose plugin leaves DRA pods to
// DynamicResources).
func (e *env) runDRAPod(t *testing.T, name, node string, spec resourcev1.ResourceClaimSpec) {
	t.Helper()
	ctx := context.Background()
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name + "-devices"}, Spec: spec}
	if _, err := e.cp.Kube.ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatalf("claim %s: %v", claim.Name, err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.PodSpec{
			SchedulerName:  "nicaffinity-scheduler",
			NodeSelector:   map[string]string{"kubernetes.io/hostname": node},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "devices", ResourceClaimName: ptr.To(claim.Name)}},
			Containers: []corev1.Container{{Name: "c", Image: "trainer",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "devices"}}}}},
		},
	}
	if _, err := e.cp.Kube.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("pod %s: %v", name, err)
	}
}

// waitObservedDRA waits for the exporter's nicaffinity.io/observed on pod.
func (e *env) waitObservedDRA(t *testing.T, pod string) annotations.Observed {
	t.Helper()
	var o annotations.Observed
	var last *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := e.cp.Kube.CoreV1().Pods("default").Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		s, ok := p.Annotations[annotations.ObservedKey]
		if !ok {
			return false, nil
		}
		o, err = annotations.ParseObserved(s)
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("pod %s never observed: %v (node %q, conditions %+v)", pod, err, last.Spec.NodeName, last.Status.Conditions)
	}
	t.Logf("%s on %s: level %s, aligned %v, NICs %v", pod, last.Spec.NodeName, o.Level, o.Aligned, o.NICs)
	return o
}

func (e *env) waitEvent(t *testing.T, pod, reason string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
		events, err := e.cp.Kube.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		seen = seen[:0]
		for _, ev := range events.Items {
			if ev.InvolvedObject.Name == pod {
				seen = append(seen, ev.Reason)
				if ev.Reason == reason {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("no %s event on %s (events: %s)", reason, pod, strings.Join(seen, ", "))
	}
}

func (e *env) deletePod(t *testing.T, name string) {
	t.Helper()
	if err := e.cp.Kube.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
}
