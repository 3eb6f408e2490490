package allocproxy

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// BindingOrders keeps, for each pod of the node, the order (resourceVersion
// as an etcd revision) at which the proxy's informer first saw it bound
// here: the revision of its binding, where the informer saw the binding
// itself. A pod's owner can raise its pod's resourceVersion at will (any
// label or annotation patch) and so move it among the candidates the
// kubelet's next request is matched with; the binding's revision is the
// scheduler's write, which the owner cannot move. A pod first seen already
// bound (the proxy started after its binding) is ordered by the revision
// it was first seen at.
//
// Invariant: an entry exists only for a pod the informer holds bound to
// the node; at most one per pod.
type BindingOrders struct {
	node string
	mu   sync.Mutex
	by   map[types.UID]uint64
}

// NewBindingOrders keeps the binding orders of node's pods.
func NewBindingOrders(node string) *BindingOrders {
	return &BindingOrders{node: node, by: map[types.UID]uint64{}}
}

// Handler feeds the orders from a pod informer.
func (b *BindingOrders) Handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    b.observe,
		UpdateFunc: func(_, obj any) { b.observe(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				b.mu.Lock()
				delete(b.by, p.UID)
				b.mu.Unlock()
			}
		},
	}
}

func (b *BindingOrders) observe(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if p.Spec.NodeName != b.node {
		delete(b.by, p.UID)
		return
	}
	if _, seen := b.by[p.UID]; !seen {
		b.by[p.UID] = order(p)
	}
}

// of is the pod's binding order, or current when the informer has not
// delivered it yet.
func (b *BindingOrders) of(uid types.UID, current uint64) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if o, ok := b.by[uid]; ok {
		return o
	}
	return current
}
