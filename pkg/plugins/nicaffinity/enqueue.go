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
// room for its GPUs.
//
// The hint runs once per pending pod per event, under the scheduling
// queue's lock, so it must be cheap: it reads the name and resourceVersion
// first, and answers from the cache's view when the cache already holds
// that version (every pod after the first, and every event the plugin's own
// informer saw first). It must also observe: the queue hears of the event
// through the scheduler's informer, which can run ahead of the plugin's
// own; a pod requeued while the cache still held the older object would
// fail Filter again and wait out its backoff. So the first pod to see a
// version the cache does not hold feeds it to the cache (Cache.update, as
// the plugin's informer would), once.
func (pl *NICAffinity) isSchedulableAfterNRTChange(logger klog.Logger, pod *v1.Pod, _, newObj interface{}) (fwk.QueueingHint, error) {
	m, err := meta.Accessor(newObj)
	if err != nil {
		logger.V(5).Info("NodeResourceTopology event with an object that is not one", "pod", klog.KObj(pod), "err", err)
		return fwk.QueueSkip, nil
	}
	node := m.GetName()
	if pl.feed != nil {
		pl.feed.update(newObj)
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
