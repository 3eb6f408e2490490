package exporter

import (
	"context"
	"sort"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/nicaffinity/nicaffinity/pkg/dra"
)

// claimed is what the pods of this node hold through DRA ResourceClaims:
// per pod ("namespace/name") the PCI addresses of their allocated devices,
// and all of them together (held, so not free in the node's object); and
// the PCI addresses the node's ResourceSlices publish, when they were read.
type claimed struct {
	byPod     map[string]dra.PodDevices
	all       []string
	published []string
	problems  []string
}

// claimedDevices reads the allocated claims of this node's pods and maps
// their devices to PCI addresses through the node's ResourceSlices
// (pkg/dra). The slices are read when a pod holds claims, or when no
// device plugin offers a GPU (a node whose GPUs a DRA driver publishes
// has none, and they are not missing). Nothing here fails a sync: a
// cluster without resource.k8s.io/v1, or an exporter without the RBAC to
// read it, has nothing to audit, and it is logged.
func (e *Exporter) claimedDevices(ctx context.Context, gpusOffered bool) claimed {
	out := claimed{byPod: map[string]dra.PodDevices{}}
	e.mu.Lock()
	lister := e.podLister
	e.mu.Unlock()
	if e.kube == nil {
		return out
	}
	var pods []*corev1.Pod
	if lister != nil {
		pods, _ = lister.List(labels.Everything()) // the informer holds this node's pods only
	}
	claimsOf := map[string][]*resourcev1.ResourceClaim{}
	for _, pod := range pods {
		for _, name := range claimNames(pod) {
			c, err := e.kube.GetResourceClaim(ctx, pod.Namespace, name)
			switch {
			case apierrors.IsNotFound(err):
				continue // not created yet, or gone with the pod
			case err != nil:
				klog.ErrorS(err, "Reading a pod's ResourceClaim", "pod", klog.KObj(pod), "claim", name)
				continue
			}
			if c.Status.Allocation != nil {
				key := pod.Namespace + "/" + pod.Name
				claimsOf[key] = append(claimsOf[key], c)
			}
		}
	}
	if len(claimsOf) == 0 && gpusOffered {
		return out
	}
	slices, err := e.kube.ListResourceSlices(ctx, e.cfg.NodeName)
	switch {
	case err != nil && len(claimsOf) > 0:
		klog.ErrorS(err, "Listing the node's ResourceSlices: pods' DRA devices are not audited", "node", e.cfg.NodeName)
		return out
	case err != nil:
		// Only looked for DRA-published GPUs (no device plugin offers one
		// yet, or the cluster has no DRA): nothing to audit, every sync.
		klog.V(2).InfoS("Listing the node's ResourceSlices", "node", e.cfg.NodeName, "err", err)
		return out
	}
	idx := dra.IndexSlices(slices, e.cfg.NodeName)
	out.problems = idx.Problems
	out.published = idx.Addresses()
	seen := map[string]bool{}
	for key, claims := range claimsOf {
		pd := idx.MapPod(claims)
		out.byPod[key] = pd
		for _, a := range pd.PCI {
			if !seen[a] {
				seen[a] = true
				out.all = append(out.all, a)
			}
		}
	}
	sort.Strings(out.all)
	return out
}

// claimNames are the names of a pod's ResourceClaims: given in its spec,
// or generated from a template and recorded in its status.
func claimNames(pod *corev1.Pod) []string {
	var out []string
	for _, rc := range pod.Spec.ResourceClaims {
		if rc.ResourceClaimName != nil {
			out = append(out, *rc.ResourceClaimName)
			continue
		}
		for _, st := range pod.Status.ResourceClaimStatuses {
			if st.Name == rc.Name && st.ResourceClaimName != nil {
				out = append(out, *st.ResourceClaimName)
			}
		}
	}
	return out
}
