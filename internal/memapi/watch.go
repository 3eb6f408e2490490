package memapi

import (
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// watcher is one watch. Writes never wait for a reader: events queue
// without bound and one goroutine hands them out in order, so a slow
// informer delays only itself (kube-apiserver buffers per watcher too,
// and closes a watcher that falls too far behind; a replay's watchers
// all catch up at every settle).
type watcher struct {
	ns      string
	match   func(runtime.Object) bool
	convert func(runtime.Object) runtime.Object
	forget  func()

	mu      sync.Mutex
	queue   []watch.Event
	wake    chan struct{}
	done    chan struct{}
	stopped bool
	once    sync.Once
	out     chan watch.Event
}

var _ watch.Interface = (*watcher)(nil)

func newWatcher(ns string, match func(runtime.Object) bool, convert func(runtime.Object) runtime.Object) *watcher {
	w := &watcher{ns: ns, match: match, convert: convert, wake: make(chan struct{}, 1), done: make(chan struct{}), out: make(chan watch.Event)}
	go w.run()
	return w
}

// send queues what change c means to this watcher: an object entering
// its selector is ADDED, one leaving it DELETED (the object before, at
// the change's version, as the watch cache sends it).
func (w *watcher) send(c change) {
	var ns string
	if c.obj != nil {
		m, _ := meta.Accessor(c.obj)
		ns = m.GetNamespace()
	} else {
		m, _ := meta.Accessor(c.old)
		ns = m.GetNamespace()
	}
	if w.ns != "" && ns != w.ns {
		return
	}
	now := c.obj != nil && w.match(c.obj)
	before := c.old != nil && w.match(c.old)
	switch {
	case c.obj == nil && before:
		w.push(watch.Event{Type: watch.Deleted, Object: w.convert(c.old.DeepCopyObject())})
	case now && before:
		w.push(watch.Event{Type: watch.Modified, Object: w.convert(c.obj.DeepCopyObject())})
	case now:
		w.push(watch.Event{Type: watch.Added, Object: w.convert(c.obj.DeepCopyObject())})
	case before:
		old := c.old.DeepCopyObject()
		if m, err := meta.Accessor(old); err == nil {
			m.SetResourceVersion(strconv.FormatInt(c.rv, 10))
		}
		w.push(watch.Event{Type: watch.Deleted, Object: w.convert(old)})
	}
}

// bookmark queues the end of a watch-list's initial events: an empty
// object of the watched type carrying the version and the annotation.
func (w *watcher) bookmark(obj runtime.Object, rv int64) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetResourceVersion(strconv.FormatInt(rv, 10))
		m.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	}
	w.push(watch.Event{Type: watch.Bookmark, Object: obj})
}

func (w *watcher) push(e watch.Event) {
	w.mu.Lock()
	if !w.stopped {
		w.queue = append(w.queue, e)
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *watcher) run() {
	defer close(w.out)
	for {
		w.mu.Lock()
		batch := w.queue
		w.queue = nil
		w.mu.Unlock()
		for _, e := range batch {
			select {
			case w.out <- e:
			case <-w.done:
				return
			}
		}
		if len(batch) > 0 {
			continue
		}
		select {
		case <-w.wake:
		case <-w.done:
			return
		}
	}
}

func (w *watcher) stop() {
	w.once.Do(func() {
		w.mu.Lock()
		w.stopped = true
		w.queue = nil
		w.mu.Unlock()
		close(w.done)
	})
}

// Stop ends the watch.
func (w *watcher) Stop() {
	w.stop()
	if w.forget != nil {
		w.forget()
	}
}

// ResultChan delivers the events.
func (w *watcher) ResultChan() <-chan watch.Event { return w.out }
