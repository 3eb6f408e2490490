package simbench

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestBench runs the A B B A measurement on a small cluster: both profiles
// bind every pod and report a throughput.
func TestBench(t *testing.T) {
	report, err := Bench(context.Background(), BenchSpec{Nodes: 20, Pods: 60, Rounds: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	results, ratio := report.Results, report.Ratio
	if len(report.Rounds) != 2 || report.Rounds[0].Order != "ABBA" || report.Rounds[1].Order != "BAAB" || report.Rounds[1].Ratio <= 0 {
		t.Errorf("rounds: %+v, want ABBA then BAAB with a ratio each", report.Rounds)
	}
	for _, r := range results {
		if r.PodsPerSec <= 0 || r.LatencyP99Ms < r.LatencyP50Ms {
			t.Errorf("%+v", r)
		}
	}
	t.Logf("%+v ratio %.2f", results, ratio)
	if ratio <= 0 {
		t.Errorf("ratio %v", ratio)
	}
}

// TestRunBatchSurvivesClosedWatch: the apiserver closes a watcher that
// falls behind a burst; runBatch catches up from a list and watches on, so
// every pod is counted once. A stand-in scheduler binds the pods; the
// first watch delivers nothing and is closed halfway.
func TestRunBatchSurvivesClosedWatch(t *testing.T) {
	const pods = 40
	kube := fake.NewClientset()
	first := watch.NewFake()
	watches := 0
	kube.PrependWatchReactor("pods", func(k8stesting.Action) (bool, watch.Interface, error) {
		if watches++; watches == 1 {
			return true, first, nil
		}
		return false, nil, nil
	})
	kube.PrependReactor("delete-collection", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		l, err := kube.Tracker().List(corev1.SchemeGroupVersion.WithResource("pods"), corev1.SchemeGroupVersion.WithKind("Pod"), "default")
		if err != nil {
			return true, nil, err
		}
		for _, p := range l.(*corev1.PodList).Items {
			if err := kube.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), "default", p.Name); err != nil {
				return true, nil, err
			}
		}
		return true, nil, nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { // binds every pod it finds, and closes the first watch halfway
		bound := 0
		for ctx.Err() == nil {
			l, _ := kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
			for _, p := range l.Items {
				if p.Spec.NodeName == "" {
					p.Spec.NodeName = "node"
					if _, err := kube.CoreV1().Pods("default").Update(ctx, &p, metav1.UpdateOptions{}); err == nil {
						if bound++; bound == pods/2 {
							first.Stop()
						}
					}
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	b, err := runBatch(ctx, kube, "nicaffinity-scheduler", "p", pods)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.latencies) != pods || watches < 2 {
		t.Errorf("%d latencies for %d pods over %d watches; want one per pod over at least 2", len(b.latencies), pods, watches)
	}
}

// TestBenchResult: one scheduler's figures from its batches, with no
// scheduler metrics between the two gathers.
func TestBenchResult(t *testing.T) {
	tot := &batchTotals{elapsed: 2 * time.Second, pods: 100}
	for i := 100; i >= 1; i-- {
		tot.latencies = append(tot.latencies, time.Duration(i)*time.Millisecond)
	}
	r := benchResult("nicaffinity-scheduler", tot, nil, nil)
	if r.PodsPerSec != 50 || r.LatencyP50Ms != 51 || r.LatencyP99Ms != 100 || len(r.ExtensionPointsP50Ms) != 0 || len(r.Attempts) != 0 {
		t.Errorf("%+v", r)
	}
}
