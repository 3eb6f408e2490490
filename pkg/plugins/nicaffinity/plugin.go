// Package nicaffinity is a kube-scheduler plugin that places pods taking
// fewer than all GPUs of a node on GPUs with an RDMA NIC under the same PCIe
// switch (PIX/PXB), reading each node's NodeResourceTopology.
package nicaffinity

import (
	"context"
	"fmt"
	"sort"
	"sync/atomic"

	"github.com/k8stopologyawareschedwg/noderesourcetopology-api/pkg/apis/topology/v1alpha2"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/nicaffinity/nicaffinity/pkg/annotations"
	"github.com/nicaffinity/nicaffinity/pkg/nrt"
)

// Name is the plugin's name in the registry and in configurations.
const Name = "NICAffinity"

var (
	_ fwk.PreFilterPlugin   = &NICAffinity{}
	_ fwk.FilterPlugin      = &NICAffinity{}
	_ fwk.PreScorePlugin    = &NICAffinity{}
	_ fwk.ScorePlugin       = &NICAffinity{}
	_ fwk.ScoreExtensions   = &NICAffinity{}
	_ fwk.ReservePlugin     = &NICAffinity{}
	_ fwk.PreBindPlugin     = &NICAffinity{}
	_ fwk.BindPlugin        = &NICAffinity{}
	_ fwk.EnqueueExtensions = &NICAffinity{}
)

// Scoring strategies.
const (
	StrategyBalanced    = "Balanced"
	StrategyMostAligned = "MostAligned"
)

// scorer turns the three components (each 0..100) into a node score 0..100.
type scorer func(w ScoringStrategy, level, certainty, packing int64) int64

var strategies = map[string]scorer{
	StrategyBalanced: func(w ScoringStrategy, level, certainty, packing int64) int64 {
		total := w.LevelWeight + w.CertaintyWeight + w.PackingWeight
		if total == 0 {
			return 0
		}
		return (w.LevelWeight*level + w.CertaintyWeight*certainty + w.PackingWeight*packing) / total
	},
	// Level decides, certainty breaks its ties, packing breaks theirs: the
	// level's five steps leave room for both in 0..100.
	StrategyMostAligned: func(_ ScoringStrategy, level, certainty, packing int64) int64 {
		return level*80/100 + certainty*15/100 + packing*5/100
	},
}

func strategyNames() []string {
	out := make([]string, 0, len(strategies))
	for n := range strategies {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// NICAffinity is the plugin.
type NICAffinity struct {
	handle fwk.Handle
	args   *Args
	cache  Cache
	score  scorer
	// defaults is the request a pod makes without annotations (level and
	// policy from args, parsed once); pods that keep them are "common".
	defaults request
	// memo: see cycleMemo.
	memo atomic.Pointer[cycleMemo]
}

// Name returns Name.
func (pl *NICAffinity) Name() string { return Name }

// New builds the plugin with an informer-backed cache of NodeResourceTopology
// objects. Bad args fail here, so a misconfigured scheduler does not start.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, err := decodeArgs(obj)
	if err != nil {
		return nil, err
	}
	cache, err := newInformerCache(ctx, h, args)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	return NewWithCache(args, h, cache)
}

// NewWithCache builds the plugin on a given cache (tests pass a static one).
func NewWithCache(args *Args, h fwk.Handle, cache Cache) (*NICAffinity, error) {
	if errs := args.Validate(); len(errs) > 0 {
		return nil, fmt.Errorf("%s args: %w", Name, errs.ToAggregate())
	}
	pl := &NICAffinity{handle: h, args: args, cache: cache, score: strategies[args.ScoringStrategy.Type],
		defaults: request{maxLevel: args.maxLevel(), required: args.DefaultPolicy == annotations.PolicyRequired, common: true}}
	if c, ok := cache.(interface{ setPrecompute(func(*nodeView)) }); ok {
		c.setPrecompute(pl.precompute)
	}
	return pl, nil
}

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

func (pl *NICAffinity) isSchedulableAfterNRTChange(logger klog.Logger, pod *v1.Pod, _, newObj interface{}) (fwk.QueueingHint, error) {
	req, _, err := pl.podRequest(pod)
	if err != nil || req == nil {
		return fwk.QueueSkip, nil
	}
	o, err := asNRT(newObj)
	if err != nil {
		logger.V(5).Info("NodeResourceTopology event with an object that is not one", "pod", klog.KObj(pod), "err", err)
		return fwk.QueueSkip, nil
	}
	// The informer cache compiles the object once; its view (free GPUs
	// minus reservations) answers. Caches that do not watch (tests) compile here.
	if obs, ok := pl.cache.(interface {
		observe(*v1alpha2.NodeResourceTopology)
	}); ok {
		obs.observe(o)
		v, why := pl.cache.View(o.Name)
		if v == nil || v.free.Count() < req.gpus {
			logger.V(5).Info("NodeResourceTopology changed but does not make the pod fit", "pod", klog.KObj(pod), "reason", why)
			return fwk.QueueSkip, nil
		}
		return fwk.Queue, nil
	}
	c, err := nrt.Compile(o, pl.args.GPUResourceName)
	if err != nil || c.Free.Count() < req.gpus {
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}

func (pl *NICAffinity) isSchedulableAfterPodDeleted(_ klog.Logger, pod *v1.Pod, oldObj, _ interface{}) (fwk.QueueingHint, error) {
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

// asNRT reads the object of a NodeResourceTopology event: the scheduler
// watches custom resources through a dynamic informer, so it arrives
// unstructured.
func asNRT(obj interface{}) (*v1alpha2.NodeResourceTopology, error) {
	switch o := obj.(type) {
	case *v1alpha2.NodeResourceTopology:
		return o, nil
	case *unstructured.Unstructured:
		out := &v1alpha2.NodeResourceTopology{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, out); err != nil {
			return nil, err
		}
		return out, nil
	}
	return nil, fmt.Errorf("unexpected %T", obj)
}
