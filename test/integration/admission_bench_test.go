package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nicaffinity/nicaffinity/internal/controlplane"
	"github.com/nicaffinity/nicaffinity/pkg/annotations"
)

// BenchmarkStatusWrite is what nicaffinity-pod-outputs costs a kubelet's
// status write (measurements/status-write-cel.md): the same pods/status
// patch by the kubelet's identity, with the shipped policies installed,
// on a pod without nicaffinity's outputs (matchConditions skip it) and on
// a pod with a plan and observed (every expression runs). The difference
// is the policy's cost per evaluated write.
func BenchmarkStatusWrite(b *testing.B) {
	cp := controlplane.Start(b, controlplane.WithAuthorization(trustTokens...))
	ctx := context.Background()
	if _, err := cp.Kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	for name, ann := range map[string]map[string]string{
		"plain":   nil,
		"planned": {annotations.AllocationKey: `{"node":"node-a","gpus":["0000:10:00.0"]}`, annotations.ObservedKey: `{"plan":"matched"}`},
	} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: ann},
			Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c", Image: "c"}}}}
		if _, err := cp.Kube.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	installObjects(b, cp.Kube, podOutputsPolicyYAML(b))
	kubelet := tokenClient(b, cp, "kubelet-a-token")
	// The policy loads asynchronously: wait until it refuses a forged plan.
	forged := []byte(`{"metadata":{"annotations":{"nicaffinity.io/allocation":"{\"node\":\"node-a\",\"gpus\":[\"0000:20:00.0\"]}"}}}`)
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		_, err := kubelet.CoreV1().Pods("default").Patch(ctx, "planned", types.StrategicMergePatchType, forged, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, "status")
		return apierrors.IsForbidden(err), nil
	}); err != nil {
		b.Fatal("nicaffinity-pod-outputs never refused a forged plan")
	}
	for _, name := range []string{"plain", "planned"} {
		b.Run(name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				i++
				patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"r%d"}]}}`, i)
				if _, err := kubelet.CoreV1().Pods("default").Patch(ctx, name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
