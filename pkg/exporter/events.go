package exporter

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// The exporter writes an Event only when what it observed changes (a pod's
// verdict, who owns the node's object), never the same one over and over.
// client-go's recorder (tools/record) exists for repeating events: it
// aggregates them and patches counts with strategic merge patch, which
// links the OpenAPI models into the binary (docs/exporter.md, Footprint).
// Here one goroutine writes them as they come, and a full queue drops the
// newest, as the recorder does, so that a slow API server never holds a sync.
const eventQueue = 64

// emit queues an event about ref. It never blocks. Without Run (--oneshot,
// --no-publish) no writer runs and nothing is queued.
func (e *Exporter) emit(ref corev1.ObjectReference, eventType, reason, message string) {
	if e.kube == nil || !e.writingEvents.Load() {
		return
	}
	now := metav1.NewTime(e.now())
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault // where events about cluster-scoped objects go
	}
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s.%x", ref.Name, now.UnixNano()),
			Namespace: ns,
		},
		InvolvedObject:      ref,
		Reason:              reason,
		Message:             message,
		Type:                eventType,
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		Source:              corev1.EventSource{Component: FieldManager, Host: e.cfg.NodeName},
		ReportingController: FieldManager,
		ReportingInstance:   FieldManager + "-" + e.cfg.NodeName,
	}
	select {
	case e.events <- ev:
	default:
		klog.InfoS("Event queue full: dropping an event", "object", klog.KRef(ref.Namespace, ref.Name), "reason", reason)
	}
}

// writeEvents writes queued events until ctx ends. Run sets
// writingEvents before it starts it, so that no early event is dropped.
func (e *Exporter) writeEvents(ctx context.Context) {
	defer e.writingEvents.Store(false)
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-e.events:
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := e.kube.CreateEvent(wctx, ev); err != nil {
				klog.ErrorS(err, "Writing an event", "object", klog.KRef(ev.InvolvedObject.Namespace, ev.InvolvedObject.Name), "reason", ev.Reason)
			}
			cancel()
		}
	}
}
