// Package nicaffinity is a kube-scheduler plugin that places pods taking
// fewer than all GPUs of a node on GPUs with an RDMA NIC under the same PCIe
// switch (PIX/PXB), reading each node's NodeResourceTopology.
package nicaffinity

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	podreq "github.com/nicaffinity/nicaffinity/pkg/request"
)

// Name is the plugin's name in the registry and in configurations.
const Name = "NICAffinity"

var (
	_ fwk.PreFilterPlugin     = &NICAffinity{}
	_ fwk.PreFilterExtensions = &NICAffinity{}
	_ fwk.FilterPlugin        = &NICAffinity{}
	_ fwk.PreScorePlugin      = &NICAffinity{}
	_ fwk.ScorePlugin         = &NICAffinity{}
	_ fwk.ScoreExtensions     = &NICAffinity{}
	_ fwk.ReservePlugin       = &NICAffinity{}
	_ fwk.PreBindPlugin       = &NICAffinity{}
	_ fwk.BindPlugin          = &NICAffinity{}
	_ fwk.EnqueueExtensions   = &NICAffinity{}
	_ fwk.SignPlugin          = &NICAffinity{}
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

// NICAffinity is the plugin.
type NICAffinity struct {
	handle fwk.Handle
	args   *Args
	cache  *Cache
	// feed is the informer edge of the cache (nil for a static cache).
	feed *informerFeed
	// scoring is shared with the cache, which precomputes with it; its
	// defaults are the request a pod makes without annotations.
	scoring *scoring
	// reader is how pods are read (pkg/request), from args.
	reader podreq.Config
	// waits are the pods Filter turned down and the bounded policy's
	// waits (waits.go).
	waits *waits
	// held is what GPUs each pod holds, parsed once per pod version
	// (held.go).
	held *heldCache
	// skipMemo is what PreFilter last checked of the snapshot's nodes
	// (skip.go).
	skipMemo atomic.Pointer[skipMemo]
}

// Name returns Name.
func (pl *NICAffinity) Name() string { return Name }

// ObjectVersions is the resourceVersion of each node's NodeResourceTopology
// that the plugin's store holds. A harness that must know the scheduler has
// caught up with what the nodes published (the simulator, between two
// moments of its virtual clock) compares it with what the apiserver serves.
func (pl *NICAffinity) ObjectVersions() map[string]string { return pl.cache.versions() }

// New builds the plugin with an informer-backed cache of NodeResourceTopology
// objects. Bad args fail here, so a misconfigured scheduler does not start.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	return newPlugin(ctx, obj, h, newOptions(nil))
}

func newPlugin(ctx context.Context, obj runtime.Object, h fwk.Handle, o options) (fwk.Plugin, error) {
	args, err := ParseArgs(obj)
	if err != nil {
		return nil, err
	}
	feed, err := newInformerFeed(ctx, h, storeConfigOf(args, h.ProfileName()), RequestConfig(args), o.objects)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	pl, err := newWithCache(args, h, feed.c, o)
	if err != nil {
		return nil, err
	}
	pl.feed = feed
	feed.turnedDown, feed.held = pl.waits, pl.held
	return pl, nil
}

// NewWithCache builds the plugin on a given cache (tests and tools pass a
// static one), which must have been made for these args (storeConfig).
func NewWithCache(args *Args, h fwk.Handle, cache *Cache, opts ...Option) (*NICAffinity, error) {
	return newWithCache(args, h, cache, newOptions(opts))
}

func newWithCache(args *Args, h fwk.Handle, cache *Cache, o options) (*NICAffinity, error) {
	if err := validate(args); err != nil {
		return nil, err
	}
	if cache.scoring == nil {
		return nil, fmt.Errorf("%s: the cache was not made for the plugin's args", Name)
	}
	pl := &NICAffinity{handle: h, args: args, cache: cache, scoring: cache.scoring, reader: RequestConfig(args)}
	pl.waits = newWaits(o.clock, pl.activate)
	pl.held = newHeldCache()
	return pl, nil
}

// activate hands pods to the scheduling queue (a handle without a queue,
// in tests of single extension points, has none to hand them to).
func (pl *NICAffinity) activate(pods map[string]*v1.Pod) {
	if pl.handle != nil {
		pl.handle.Activate(klog.Background(), pods)
	}
}

// NextRelax is when the next bounded wait ends, for a harness that moves
// a virtual clock from moment to moment (the simulator): it must stop
// there, so the pods whose wait ends are retried then.
func (pl *NICAffinity) NextRelax() (time.Time, bool) { return pl.waits.next() }
