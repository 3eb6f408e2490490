package memapi

import (
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	podsGVR   = corev1.SchemeGroupVersion.WithResource("pods")
	eventsGVR = corev1.SchemeGroupVersion.WithResource("events")
)

// statusResources have a status subresource: an update of the object
// keeps its status, an update of the status keeps the rest.
var statusResources = map[schema.GroupResource]bool{
	{Resource: "pods"}: true, {Resource: "nodes"}: true, {Resource: "namespaces"}: true,
	{Group: "scheduling.k8s.io", Resource: "podgroups"}: true, {Group: "scheduling.k8s.io", Resource: "workloads"}: true,
	{Group: "resource.k8s.io", Resource: "resourceclaims"}: true,
}

// isEvent: Events are accepted and dropped (no replay reads them).
func isEvent(gvr schema.GroupVersionResource) bool {
	return gvr.Resource == "events" && (gvr.Group == "" || gvr.Group == "events.k8s.io")
}

// selector is a list or watch's label and field selectors as one match.
func selector(gvr schema.GroupVersionResource, l labels.Selector, f fields.Selector) (func(runtime.Object) bool, error) {
	if l == nil {
		l = labels.Everything()
	}
	if f == nil {
		f = fields.Everything()
	}
	for _, r := range f.Requirements() {
		if !fieldSupported(gvr, r.Field) {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("field label not supported: %s", r.Field))
		}
	}
	if l.Empty() && f.Empty() {
		return func(runtime.Object) bool { return true }, nil
	}
	return func(obj runtime.Object) bool {
		m, err := meta.Accessor(obj)
		if err != nil || !l.Matches(labels.Set(m.GetLabels())) {
			return false
		}
		return f.Empty() || f.Matches(fieldsOf(obj, m))
	}, nil
}

// fieldSupported lists the field selectors the replay's components use
// (kube-apiserver supports these and more).
func fieldSupported(gvr schema.GroupVersionResource, field string) bool {
	switch field {
	case "metadata.name", "metadata.namespace":
		return true
	}
	switch gvr.GroupResource() {
	case podsGVR.GroupResource():
		switch field {
		case "spec.nodeName", "spec.schedulerName", "status.phase", "status.nominatedNodeName":
			return true
		}
	case resourcev1.SchemeGroupVersion.WithResource("resourceslices").GroupResource():
		switch field {
		case resourcev1.ResourceSliceSelectorNodeName, resourcev1.ResourceSliceSelectorDriver:
			return true
		}
	}
	return false
}

func fieldsOf(obj runtime.Object, m metav1.Object) fields.Set {
	set := fields.Set{"metadata.name": m.GetName(), "metadata.namespace": m.GetNamespace()}
	switch o := obj.(type) {
	case *corev1.Pod:
		set["spec.nodeName"] = o.Spec.NodeName
		set["spec.schedulerName"] = o.Spec.SchedulerName
		set["status.phase"] = string(o.Status.Phase)
		set["status.nominatedNodeName"] = o.Status.NominatedNodeName
	case *resourcev1.ResourceSlice:
		if o.Spec.NodeName != nil {
			set[resourcev1.ResourceSliceSelectorNodeName] = *o.Spec.NodeName
		}
		set[resourcev1.ResourceSliceSelectorDriver] = o.Spec.Driver
	}
	return set
}

// prepareCreate is what kube-apiserver does to a new object before it
// stores it: the v1 defaults, and for a pod its strategy (status
// Pending, QoS) and the Priority admission's priority 0.
func (a *API) prepareCreate(gvr schema.GroupVersionResource, obj runtime.Object) {
	a.scheme.Default(obj)
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending, QOSClass: qosOf(pod)}
	if pod.Spec.Priority == nil && pod.Spec.PriorityClassName == "" {
		zero := int32(0)
		pod.Spec.Priority = &zero
	}
}

// qosOf is the pod's QoS class (requests equal to limits for every
// container's CPU and memory: Guaranteed; none: BestEffort).
func qosOf(pod *corev1.Pod) corev1.PodQOSClass {
	any, all := false, true
	for _, c := range pod.Spec.Containers {
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := c.Resources.Requests[r]
			lim, hasLim := c.Resources.Limits[r]
			any = any || hasReq || hasLim
			if !hasLim || (hasReq && req.Cmp(lim) != 0) {
				all = false
			}
		}
	}
	switch {
	case !any:
		return corev1.PodQOSBestEffort
	case all:
		return corev1.PodQOSGuaranteed
	}
	return corev1.PodQOSBurstable
}

// mergeUpdate is the object an update stores: with a status
// subresource, the main resource keeps the stored status and the status
// keeps the stored rest; an update never changes deletion metadata.
func mergeUpdate(gvr schema.GroupVersionResource, subresource string, cur, obj runtime.Object) (runtime.Object, error) {
	if subresource != "" && subresource != "status" {
		return nil, apierrors.NewMethodNotSupported(gvr.GroupResource(), "update "+subresource)
	}
	req, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	rv := req.GetResourceVersion()
	if statusResources[gvr.GroupResource()] {
		if subresource == "status" {
			obj, err = withStatus(cur, obj)
		} else {
			obj, err = withStatus(obj, cur)
		}
		if err != nil {
			return nil, err
		}
	} else if subresource == "status" {
		return nil, apierrors.NewNotFound(gvr.GroupResource(), "status")
	}
	cm, _ := meta.Accessor(cur)
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	m.SetResourceVersion(rv) // the request's: optimistic concurrency
	if cm.GetDeletionTimestamp() != nil {
		m.SetDeletionTimestamp(cm.GetDeletionTimestamp())
	}
	if cm.GetDeletionGracePeriodSeconds() != nil && m.GetDeletionGracePeriodSeconds() == nil {
		m.SetDeletionGracePeriodSeconds(cm.GetDeletionGracePeriodSeconds())
	}
	return obj, nil
}

// withStatus returns a copy of base with the status of from.
func withStatus(base, from runtime.Object) (runtime.Object, error) {
	out := base.DeepCopyObject()
	switch o := out.(type) {
	case *corev1.Pod:
		f := from.(*corev1.Pod)
		o.Status = *f.Status.DeepCopy()
		if o.Status.QOSClass == "" {
			o.Status.QOSClass = base.(*corev1.Pod).Status.QOSClass
		}
		return out, nil
	}
	// Every other type with a status: through the unstructured form.
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(out)
	if err != nil {
		return nil, err
	}
	fu, err := runtime.DefaultUnstructuredConverter.ToUnstructured(from)
	if err != nil {
		return nil, err
	}
	if st, ok := fu["status"]; ok {
		u["status"] = st
	} else {
		delete(u, "status")
	}
	typed := base.DeepCopyObject()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u, typed); err != nil {
		return nil, err
	}
	return typed, nil
}

// deletion is what deleting cur does, as kube-apiserver's registry does
// it (rest.BeforeDelete with the pod strategy's CheckGracefulDelete):
// the object to write first (nil: none), and whether it then goes.
func deletion(cur runtime.Object, opts metav1.DeleteOptions, now time.Time) (runtime.Object, bool, error) {
	m, err := meta.Accessor(cur)
	if err != nil {
		return nil, false, err
	}
	if p := opts.Preconditions; p != nil {
		if p.UID != nil && *p.UID != m.GetUID() {
			return nil, false, apierrors.NewConflict(schema.GroupResource{Resource: "object"}, m.GetName(), fmt.Errorf("the UID in the precondition (%s) does not match the UID in record (%s)", *p.UID, m.GetUID()))
		}
		if p.ResourceVersion != nil && *p.ResourceVersion != m.GetResourceVersion() {
			return nil, false, apierrors.NewConflict(schema.GroupResource{Resource: "object"}, m.GetName(), fmt.Errorf("the ResourceVersion in the precondition (%s) does not match the ResourceVersion in record (%s)", *p.ResourceVersion, m.GetResourceVersion()))
		}
	}
	pod, isPod := cur.(*corev1.Pod)
	if !isPod {
		if len(m.GetFinalizers()) > 0 {
			if m.GetDeletionTimestamp() != nil {
				return nil, false, nil
			}
			next := cur.DeepCopyObject()
			nm, _ := meta.Accessor(next)
			t := metav1.NewTime(now)
			zero := int64(0)
			nm.SetDeletionTimestamp(&t)
			nm.SetDeletionGracePeriodSeconds(&zero)
			return next, false, nil
		}
		return nil, true, nil
	}
	grace := opts.GracePeriodSeconds
	if grace != nil && *grace < 0 {
		one := int64(1)
		grace = &one
	}
	if pod.DeletionTimestamp != nil {
		g := pod.DeletionGracePeriodSeconds
		switch {
		case g == nil || *g == 0:
			return nil, true, nil
		case grace == nil || *grace >= *g:
			return nil, false, nil // graceful deletion pending
		}
		return terminating(pod, *grace, now), *grace == 0, nil
	}
	period := int64(0)
	switch {
	case grace != nil:
		period = *grace
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		period = *pod.Spec.TerminationGracePeriodSeconds
	}
	if pod.Spec.NodeName == "" || pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
		period = 0
	}
	next := terminating(pod, period, now)
	if len(pod.Finalizers) > 0 {
		return next, false, nil
	}
	return next, period == 0, nil
}

func terminating(pod *corev1.Pod, period int64, now time.Time) *corev1.Pod {
	next := pod.DeepCopy()
	t := metav1.NewTime(now.Add(time.Duration(period) * time.Second))
	next.DeletionTimestamp = &t
	next.DeletionGracePeriodSeconds = &period
	if next.Generation > 0 {
		next.Generation++
	}
	return next
}

// bind is the pods/binding subresource: the pod goes to the node with the
// binding's annotations, and its PodScheduled condition turns true.
func bind(cur *corev1.Pod, b *corev1.Binding, now time.Time) (*corev1.Pod, error) {
	if b.UID != "" && b.UID != cur.UID {
		return nil, apierrors.NewConflict(podsGVR.GroupResource(), cur.Name, fmt.Errorf("the UID in the precondition (%s) does not match the UID in record (%s)", b.UID, cur.UID))
	}
	if b.ResourceVersion != "" && b.ResourceVersion != cur.ResourceVersion {
		return nil, apierrors.NewConflict(podsGVR.GroupResource(), cur.Name, fmt.Errorf("the ResourceVersion in the precondition (%s) does not match the ResourceVersion in record (%s)", b.ResourceVersion, cur.ResourceVersion))
	}
	if b.Target.Kind != "" && b.Target.Kind != "Node" {
		return nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Binding"}, b.Name, nil)
	}
	if b.Target.Name == "" {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("binding of pod %s names no node", cur.Name))
	}
	fail := func(msg string) error {
		return apierrors.NewConflict(podsGVR.GroupResource(), cur.Name, fmt.Errorf("%s", msg))
	}
	switch {
	case cur.DeletionTimestamp != nil:
		return nil, fail(fmt.Sprintf("pod %s is being deleted, cannot be assigned to a host", cur.Name))
	case cur.Spec.NodeName != "":
		return nil, fail(fmt.Sprintf("pod %v is already assigned to node %q", cur.Name, cur.Spec.NodeName))
	case len(cur.Spec.SchedulingGates) != 0:
		return nil, fail(fmt.Sprintf("pod %v has non-empty .spec.schedulingGates", cur.Name))
	}
	pod := cur.DeepCopy()
	pod.Spec.NodeName = b.Target.Name
	pod.Status.NominatedNodeName = ""
	if len(b.Annotations) > 0 && pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	for k, v := range b.Annotations {
		pod.Annotations[k] = v
	}
	setCondition(&pod.Status, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, now)
	return pod, nil
}

// setCondition is podutil.UpdatePodCondition: the transition time moves
// only when the status does.
func setCondition(st *corev1.PodStatus, c corev1.PodCondition, now time.Time) {
	c.LastTransitionTime = metav1.NewTime(now)
	for i := range st.Conditions {
		old := &st.Conditions[i]
		if old.Type != c.Type {
			continue
		}
		if old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
		if old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message &&
			old.LastProbeTime.Equal(&c.LastProbeTime) {
			return
		}
		*old = c
		return
	}
	st.Conditions = append(st.Conditions, c)
}

func parseRV(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	rv, err := strconv.ParseInt(s, 10, 64)
	if err != nil || rv < 0 {
		return 0, apierrors.NewBadRequest(fmt.Sprintf("invalid resourceVersion %q", s))
	}
	return rv, nil
}
