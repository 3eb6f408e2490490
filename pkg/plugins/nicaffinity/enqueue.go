package nicaffinity

import (
	"context"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
)

// EventsToRegister: a node's object appearing or changing, a pod going away
// (its GPUs come free), a node appearing.
func (pl *NICAffinity) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: nrtResource, ActionType: fwk.Add | fwk.Update}, QueueingHintFn: pl.isSchedulableAfterNRTChange},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}, QueueingHintFn: pl.isSchedulableAfterPodDeleted},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add}},
	}, nil
}

// nrtResource is the NodeResourceTopology resource as the framework names
// custom resources: <plural>.<version>.<group>.
const nrtResource fwk.EventResource = "noderesourcetopologies.v1alpha2.topology.node.k8s.io"

// isSchedulableAfterNRTChange requeues a pod when the node's new object has
// room for its GPUs. It only reads: it runs once per pending pod per event,
// under the scheduling queue's lock.
//
// The queue hears of the event through the scheduler's informer, which can
// run ahead of the plugin's own. While the store does not hold the event's
// version the hint skips: a pod requeued now would meet the older object
// in Filter and be turned down again. The plugin's informer requeues the
// pods Filter turned down when it brings that version (observe in
// informers.go, Handle.Activate), so no pod waits on which informer came
// first.
func (pl *NICAffinity) isSchedulableAfterNRTChange(logger klog.Logger, pod *v1.Pod, _, newObj interface{}) (fwk.QueueingHint, error) {
	m, err := meta.Accessor(newObj)
	if err != nil {
		logger.V(5).Info("NodeResourceTopology event with an object that is not one", "pod", klog.KObj(pod), "err", err)
		return fwk.QueueSkip, nil
	}
	node := m.GetName()
	if !pl.cache.has(node, m.GetResourceVersion()) {
		logger.V(5).Info("NodeResourceTopology version not in the plugin's store yet; its informer requeues the pod", "pod", klog.KObj(pod), "node", node)
		return fwk.QueueSkip, nil
	}
	v, why := pl.cache.View(node)
	if v == nil {
		logger.V(5).Info("NodeResourceTopology changed but cannot be used", "pod", klog.KObj(pod), "node", node, "reason", why)
		return fwk.QueueSkip, nil
	}
	req, _, err := pl.podRequest(pod)
	if err != nil || req == nil || v.Free.Count() < req.GPUs {
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}

func (pl *NICAffinity) isSchedulableAfterPodDeleted(_ klog.Logger, _ *v1.Pod, oldObj, _ interface{}) (fwk.QueueingHint, error) {
	deleted, ok := oldObj.(*v1.Pod)
	if !ok {
		return fwk.Queue, nil
	}
	req, _, err := pl.podRequest(deleted)
	if err != nil || req == nil || deleted.Spec.NodeName == "" {
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}
