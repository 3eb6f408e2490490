package memapi

import (
	"context"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/nicaffinity/nicaffinity/pkg/exporter"
)

// ExporterClient is the exporter's client on the store: what
// exporter.NewClient does over HTTP.
type ExporterClient struct {
	api  *API
	kube kubernetes.Interface
}

var (
	_ exporter.Kube      = (*ExporterClient)(nil)
	_ exporter.NRTClient = (*ExporterClient)(nil)
)

// Exporter is a new exporter client on the store.
func (a *API) Exporter() *ExporterClient { return &ExporterClient{api: a, kube: a.Kube()} }

func (c *ExporterClient) ListPods(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	return c.kube.CoreV1().Pods("").List(ctx, opts)
}

func (c *ExporterClient) WatchPods(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return c.kube.CoreV1().Pods("").Watch(ctx, opts)
}

func (c *ExporterClient) PatchPod(ctx context.Context, namespace, name string, mergePatch []byte) error {
	_, err := c.kube.CoreV1().Pods(namespace).Patch(ctx, name, types.MergePatchType, mergePatch, metav1.PatchOptions{})
	return err
}

func (c *ExporterClient) ListResourceSlices(ctx context.Context, node string) ([]resourcev1.ResourceSlice, error) {
	l, err := c.kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: resourcev1.ResourceSliceSelectorNodeName + "=" + node})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

func (c *ExporterClient) GetResourceClaim(ctx context.Context, namespace, name string) (*resourcev1.ResourceClaim, error) {
	return c.kube.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
}

// CreateEvent drops the event (no replay reads Events).
func (c *ExporterClient) CreateEvent(context.Context, *corev1.Event) error { return nil }

func (c *ExporterClient) ApplyNRT(ctx context.Context, name string, body []byte) error {
	return c.api.ApplyNRT(ctx, name, body)
}

func (c *ExporterClient) GetNRT(_ context.Context, name string) (*v1alpha2.NodeResourceTopology, error) {
	obj, err := c.api.store.Get(nrtGVR, "", name)
	if err != nil {
		return nil, err
	}
	return obj.(*v1alpha2.NodeResourceTopology), nil
}
