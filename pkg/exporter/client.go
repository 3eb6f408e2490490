package exporter

import (
	"context"
	"fmt"
	"time"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// Kube is all the exporter asks of the API server besides its node's
// NodeResourceTopology: the pods of its node, a merge patch of one pod's
// annotations, and events.
type Kube interface {
	ListPods(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
	WatchPods(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	PatchPod(ctx context.Context, namespace, name string, mergePatch []byte) error
	// ListResourceSlices lists the DRA ResourceSlices of node;
	// GetResourceClaim reads one claim (the DRA audit, dra.go).
	ListResourceSlices(ctx context.Context, node string) ([]resourcev1.ResourceSlice, error)
	GetResourceClaim(ctx context.Context, namespace, name string) (*resourcev1.ResourceClaim, error)

	CreateEvent(ctx context.Context, e *corev1.Event) error
}

// NRTClient applies and reads NodeResourceTopology objects.
type NRTClient interface {
	// ApplyNRT server-side applies body (a whole object, JSON) as
	// FieldManager, without forcing.
	ApplyNRT(ctx context.Context, name string, body []byte) error
	GetNRT(ctx context.Context, name string) (*v1alpha2.NodeResourceTopology, error)
}

// clientScheme knows core/v1, resource.k8s.io/v1 and the
// NodeResourceTopology API, nothing else. client-go's typed clients register every API group's types (their
// package kubernetes/scheme), which more than doubled the exporter's
// resident memory for two groups it uses (docs/exporter.md, Footprint).
var clientScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(s))
	utilruntime.Must(resourcev1.AddToScheme(s))
	utilruntime.Must(v1alpha2.AddToScheme(s))
	return s
}()

var parameterCodec = runtime.NewParameterCodec(clientScheme)

// Client is the exporter's API client: REST clients on core/v1,
// resource.k8s.io/v1 and topology.node.k8s.io/v1alpha2, all talking JSON. It implements Kube and
// NRTClient.
type Client struct {
	core, res, topo *rest.RESTClient
}

var (
	_ Kube      = (*Client)(nil)
	_ NRTClient = (*Client)(nil)
)

// NewClient builds a Client from cfg (not changed).
func NewClient(cfg *rest.Config) (*Client, error) {
	codecs := serializer.NewCodecFactory(clientScheme).WithoutConversion()
	build := func(gv schema.GroupVersion, apiPath string) (*rest.RESTClient, error) {
		c := rest.CopyConfig(cfg)
		c.APIPath, c.GroupVersion = apiPath, &gv
		c.ContentType, c.AcceptContentTypes = runtime.ContentTypeJSON, runtime.ContentTypeJSON
		c.NegotiatedSerializer = codecs
		if c.UserAgent == "" {
			c.UserAgent = rest.DefaultKubernetesUserAgent()
		}
		return rest.RESTClientFor(c)
	}
	core, err := build(corev1.SchemeGroupVersion, "/api")
	if err != nil {
		return nil, fmt.Errorf("core/v1 client: %w", err)
	}
	res, err := build(resourcev1.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, fmt.Errorf("resource.k8s.io/v1 client: %w", err)
	}
	topo, err := build(v1alpha2.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, fmt.Errorf("NodeResourceTopology client: %w", err)
	}
	return &Client{core: core, res: res, topo: topo}, nil
}

func (c *Client) ListPods(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	out := &corev1.PodList{}
	err := c.core.Get().Resource("pods").VersionedParams(&opts, parameterCodec).
		Timeout(timeoutOf(opts)).Do(ctx).Into(out)
	return out, err
}

func (c *Client) WatchPods(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.core.Get().Resource("pods").VersionedParams(&opts, parameterCodec).
		Timeout(timeoutOf(opts)).Watch(ctx)
}

func (c *Client) PatchPod(ctx context.Context, namespace, name string, mergePatch []byte) error {
	return c.core.Patch(types.MergePatchType).Namespace(namespace).Resource("pods").Name(name).
		VersionedParams(&metav1.PatchOptions{FieldManager: FieldManager}, parameterCodec).
		Body(mergePatch).Do(ctx).Error()
}

func (c *Client) ListResourceSlices(ctx context.Context, node string) ([]resourcev1.ResourceSlice, error) {
	out := &resourcev1.ResourceSliceList{}
	opts := metav1.ListOptions{FieldSelector: resourcev1.ResourceSliceSelectorNodeName + "=" + node}
	err := c.res.Get().Resource("resourceslices").VersionedParams(&opts, parameterCodec).Do(ctx).Into(out)
	return out.Items, err
}

func (c *Client) GetResourceClaim(ctx context.Context, namespace, name string) (*resourcev1.ResourceClaim, error) {
	out := &resourcev1.ResourceClaim{}
	err := c.res.Get().Namespace(namespace).Resource("resourceclaims").Name(name).Do(ctx).Into(out)
	return out, err
}

func (c *Client) ApplyNRT(ctx context.Context, name string, body []byte) error {
	force := false
	return c.topo.Patch(types.ApplyPatchType).Resource("noderesourcetopologies").Name(name).
		VersionedParams(&metav1.PatchOptions{FieldManager: FieldManager, Force: &force}, parameterCodec).
		Body(body).Do(ctx).Error()
}

func (c *Client) GetNRT(ctx context.Context, name string) (*v1alpha2.NodeResourceTopology, error) {
	out := &v1alpha2.NodeResourceTopology{}
	err := c.topo.Get().Resource("noderesourcetopologies").Name(name).Do(ctx).Into(out)
	return out, err
}

func (c *Client) CreateEvent(ctx context.Context, e *corev1.Event) error {
	return c.core.Post().Namespace(e.Namespace).Resource("events").Body(e).Do(ctx).Error()
}

func timeoutOf(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}
