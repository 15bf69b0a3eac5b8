package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	autoscalingv2ac "k8s.io/client-go/applyconfigurations/autoscaling/v2"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

const fieldOwner = client.FieldOwner("reference-operator")

// isvcVersion is the InferenceService API version this operator reads and writes: v1, the storage
// version (the API server never converts). hack/build-reference-operator keys its cache on it too.
const isvcVersion = "v1"

var isvcGVK = schema.GroupVersionKind{Group: group, Version: isvcVersion, Kind: "InferenceService"}

func newInferenceService() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(isvcGVK)
	return u
}

// Status is the InferenceService status this operator writes: the same fields and conditions as
// ours (status.compute: Ready, Reconciled and one condition per child kind, the NetworkPolicy and
// monitoring ones as ours reports them with those children off by its default), server-side
// applied, so that the API server stores, validates and sends the same status as for ours. Until
// 2026-12-05 it wrote Ready alone by merge patch: a status of one condition instead of seven, which
// costs the API server about 3 ms less per status write (bench/README.md).
type Status struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Replicas           int32              `json:"replicas"`
	ReadyReplicas      int32              `json:"readyReplicas"`
	ReplicasSummary    string             `json:"replicasSummary,omitempty"`
	Selector           string             `json:"selector,omitempty"`
	URL                string             `json:"url,omitempty"`
	ActiveVersion      string             `json:"activeVersion,omitempty"`
	LastReconcileTime  string             `json:"lastReconcileTime,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

// InferenceServiceReconciler applies the predictor Deployment, Service and (when
// maxReplicas > minReplicas) HPA of an InferenceService and reports Ready on its status.
type InferenceServiceReconciler struct {
	client.Client
	Recorder record.EventRecorder
}

func (r *InferenceServiceReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	started := time.Now()

	isvc := newInferenceService()
	if err := r.Get(ctx, req.NamespacedName, isvc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !isvc.GetDeletionTimestamp().IsZero() {
		return ctrl.Result{}, nil // the garbage collector removes the children
	}
	var spec Spec
	rawSpec, _, _ := unstructured.NestedMap(isvc.Object, "spec")
	if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(rawSpec, &spec); err != nil {
		return ctrl.Result{}, reconcile.TerminalError(fmt.Errorf("decoding spec: %w", err))
	}
	rt, ok := runtimes[spec.Predictor.Runtime]
	if !ok {
		return ctrl.Result{}, reconcile.TerminalError(fmt.Errorf("unknown runtime %q", spec.Predictor.Runtime))
	}
	o := owner{
		apiVersion: isvc.GetAPIVersion(), kind: isvc.GetKind(),
		name: isvc.GetName(), namespace: isvc.GetNamespace(), uid: string(isvc.GetUID()),
		spec: spec,
	}
	key := types.NamespacedName{Namespace: o.namespace, Name: childName(o)}
	var created []string

	// Deployment: the live one (from the cache) gives the replica count while an HPA owns it.
	live := &appsv1.Deployment{}
	if err := r.Get(ctx, key, live); apierrors.IsNotFound(err) {
		live = nil
	} else if err != nil {
		return ctrl.Result{}, err
	}
	deploy, err := buildDeployment(o, rt, live)
	if err != nil {
		return ctrl.Result{}, reconcile.TerminalError(err)
	}
	if err := r.Apply(ctx, deploy, fieldOwner, client.ForceOwnership); err != nil {
		return ctrl.Result{}, fmt.Errorf("applying Deployment %s: %w", key.Name, err)
	}
	if live == nil {
		created = append(created, "Deployment/"+key.Name)
	}

	// Service
	svcExisted, err := r.exists(ctx, key, &corev1.Service{})
	if err != nil {
		return ctrl.Result{}, err
	}
	svc := buildService(o, rt)
	if err := r.Apply(ctx, svc, fieldOwner, client.ForceOwnership); err != nil {
		return ctrl.Result{}, fmt.Errorf("applying Service %s: %w", key.Name, err)
	}
	if !svcExisted {
		created = append(created, "Service/"+key.Name)
	}

	// HorizontalPodAutoscaler: only while it owns the replica count; a stale one is deleted.
	hpa := &autoscalingv2.HorizontalPodAutoscaler{}
	hpaErr := r.Get(ctx, key, hpa)
	if hpaErr != nil && !apierrors.IsNotFound(hpaErr) {
		return ctrl.Result{}, hpaErr
	}
	var applied *autoscalingv2ac.HorizontalPodAutoscalerApplyConfiguration
	if hpaOwnsReplicas(spec) {
		applied = buildHPA(o, rt)
		if err := r.Apply(ctx, applied, fieldOwner, client.ForceOwnership); err != nil {
			return ctrl.Result{}, fmt.Errorf("applying HorizontalPodAutoscaler %s: %w", key.Name, err)
		}
		if apierrors.IsNotFound(hpaErr) {
			created = append(created, "HorizontalPodAutoscaler/"+key.Name)
		}
	} else if hpaErr == nil && metav1.IsControlledBy(hpa, isvc) {
		if err := r.Delete(ctx, hpa, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("deleting HorizontalPodAutoscaler %s: %w", key.Name, err)
		}
	}

	if len(created) > 0 {
		r.Recorder.Eventf(isvc, corev1.EventTypeNormal, "Created", "created %s", strings.Join(created, ", "))
	}

	wrote, err := r.writeStatus(ctx, isvc, computeStatus(isvc.GetGeneration(), o, deploy, svc, applied))
	if err != nil {
		return ctrl.Result{}, err
	}
	log.V(1).Info("reconciled", "created", created, "statusWritten", wrote,
		"durationMs", float64(time.Since(started).Microseconds())/1000)
	return ctrl.Result{}, nil
}

func (r *InferenceServiceReconciler) exists(ctx context.Context, key types.NamespacedName, obj client.Object) (bool, error) {
	err := r.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

func val[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// deploymentCounts reads the applied Deployment (the apply response, status included).
func deploymentCounts(d *appsv1ac.DeploymentApplyConfiguration) (generation, observed int64, replicas, available, ready, desired int32) {
	if d.ObjectMetaApplyConfiguration != nil {
		generation = val(d.Generation)
	}
	if d.Spec != nil {
		desired = val(d.Spec.Replicas)
	}
	if st := d.Status; st != nil {
		observed, replicas = val(st.ObservedGeneration), val(st.Replicas)
		available, ready = val(st.AvailableReplicas), val(st.ReadyReplicas)
	}
	return
}

// readyCondition from the applied Deployment and Service: True once the Deployment has an
// available replica for its current generation and the Service has a cluster IP.
func readyCondition(generation int64, spec Spec, deploy *appsv1ac.DeploymentApplyConfiguration, svc *corev1ac.ServiceApplyConfiguration) metav1.Condition {
	c := metav1.Condition{Type: "Ready", ObservedGeneration: generation}
	gen, observed, _, available, ready, desired := deploymentCounts(deploy)
	summary := fmt.Sprintf("%d/%d replicas ready", ready, desired)
	clusterIP := ""
	if svc.Spec != nil {
		clusterIP = val(svc.Spec.ClusterIP)
	}
	switch {
	case spec.Predictor.Autoscaling.MinReplicas == 0:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, "ScaledToZero", "minReplicas is 0: no replica is running"
	case observed < gen:
		c.Status, c.Reason = metav1.ConditionFalse, "RollingOut"
		c.Message = fmt.Sprintf("waiting for the Deployment controller to observe generation %d", gen)
	case available < 1:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, "Waiting", summary
	case clusterIP == "" || clusterIP == corev1.ClusterIPNone:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, "NoClusterIP", "the predictor Service has no cluster IP"
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, "Serving", summary
	}
	return c
}

// computeStatus from the applies' answers, as ours does (status.compute): Ready, Reconciled,
// DeploymentAvailable, ServiceReady, AutoscalerReady, NetworkPolicyReady and MonitoringReady with
// ours' reasons and messages, the replica counts, the selector, and the url and activeVersion
// while serving. lastTransitionTime and lastReconcileTime are set by writeStatus.
func computeStatus(generation int64, o owner, deploy *appsv1ac.DeploymentApplyConfiguration, svc *corev1ac.ServiceApplyConfiguration, hpa *autoscalingv2ac.HorizontalPodAutoscalerApplyConfiguration) Status {
	spec := o.spec
	gen, observed, replicas, available, ready, desired := deploymentCounts(deploy)
	url := fmt.Sprintf("http://%s.%s.svc.cluster.local:%d", childName(o), o.namespace, spec.Predictor.Port)
	clusterIP := ""
	if svc.Spec != nil {
		clusterIP = val(svc.Spec.ClusterIP)
	}
	cond := func(typ string, status metav1.ConditionStatus, reason, message string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: generation}
	}
	readyCond := readyCondition(generation, spec, deploy, svc)
	st := Status{
		ObservedGeneration: generation,
		Replicas:           replicas,
		ReadyReplicas:      ready,
		ReplicasSummary:    fmt.Sprintf("%d/%d", ready, desired),
		Selector:           fmt.Sprintf("%s/component=%s,%s/inferenceservice=%s", group, component, group, o.name),
	}
	if readyCond.Status == metav1.ConditionTrue {
		st.URL, st.ActiveVersion = url, spec.Predictor.Model.URI
	}

	var deployCond metav1.Condition
	serving := metav1.ConditionFalse
	if available > 0 {
		serving = metav1.ConditionTrue
	}
	var updated int32
	if deploy.Status != nil {
		updated = val(deploy.Status.UpdatedReplicas)
	}
	switch {
	case spec.Predictor.Autoscaling.MinReplicas == 0:
		deployCond = cond("DeploymentAvailable", metav1.ConditionTrue, "ScaledToZero", "minReplicas is 0: scaled to zero")
	case observed < gen:
		deployCond = cond("DeploymentAvailable", serving, "RollingOut", fmt.Sprintf("waiting for the Deployment controller to observe generation %d", gen))
	case updated < desired:
		deployCond = cond("DeploymentAvailable", serving, "RollingOut", fmt.Sprintf("%d of %d replicas updated", updated, desired))
	case available == 0:
		deployCond = cond("DeploymentAvailable", metav1.ConditionFalse, "NoReplicasAvailable", fmt.Sprintf("%d/%d replicas available", available, desired))
	case available < desired:
		deployCond = cond("DeploymentAvailable", metav1.ConditionTrue, "PartiallyAvailable", fmt.Sprintf("%d/%d replicas available", available, desired))
	default:
		deployCond = cond("DeploymentAvailable", metav1.ConditionTrue, "ReplicasAvailable", fmt.Sprintf("%d/%d replicas available", available, desired))
	}

	svcCond := cond("ServiceReady", metav1.ConditionTrue, "ClusterIPAssigned", fmt.Sprintf("%s (%s)", url, clusterIP))
	if clusterIP == "" || clusterIP == corev1.ClusterIPNone {
		svcCond = cond("ServiceReady", metav1.ConditionFalse, "NoClusterIP", fmt.Sprintf("Service %s has no cluster IP", childName(o)))
	}

	st.Conditions = []metav1.Condition{
		readyCond,
		cond("Reconciled", metav1.ConditionTrue, "ChildrenApplied", fmt.Sprintf("children match generation %d", generation)),
		deployCond,
		svcCond,
		autoscalerCondition(spec, hpa, cond),
		cond("NetworkPolicyReady", metav1.ConditionTrue, "NotRequested", "no NetworkPolicy: off by the operator's default (--network-policy)"),
		cond("MonitoringReady", metav1.ConditionTrue, "MonitoringDisabled", "monitoring is turned off by the operator's default (--no-monitoring)"),
	}
	return st
}

// autoscalerCondition: NotRequired without an HPA; from the applied HPA's AbleToScale and
// ScalingActive conditions with one (ours: children/hpa.py).
func autoscalerCondition(spec Spec, hpa *autoscalingv2ac.HorizontalPodAutoscalerApplyConfiguration, cond func(string, metav1.ConditionStatus, string, string) metav1.Condition) metav1.Condition {
	const typ = "AutoscalerReady"
	if hpa == nil {
		a := spec.Predictor.Autoscaling
		if a.MinReplicas == 0 {
			return cond(typ, metav1.ConditionTrue, "NotRequired", "minReplicas is 0: scaled to zero, nothing to autoscale")
		}
		return cond(typ, metav1.ConditionTrue, "NotRequired", fmt.Sprintf("fixed replica count: minReplicas == maxReplicas == %d", a.MinReplicas))
	}
	find := func(t autoscalingv2.HorizontalPodAutoscalerConditionType) *autoscalingv2ac.HorizontalPodAutoscalerConditionApplyConfiguration {
		if hpa.Status == nil {
			return nil
		}
		for i := range hpa.Status.Conditions {
			if c := &hpa.Status.Conditions[i]; c.Type != nil && *c.Type == t {
				return c
			}
		}
		return nil
	}
	able, active := find(autoscalingv2.AbleToScale), find(autoscalingv2.ScalingActive)
	for _, c := range []struct {
		c        *autoscalingv2ac.HorizontalPodAutoscalerConditionApplyConfiguration
		fallback string
	}{{able, "NotAbleToScale"}, {active, "ScalingInactive"}} {
		if c.c != nil && val(c.c.Status) == corev1.ConditionFalse {
			reason := val(c.c.Reason)
			if reason == "" {
				reason = c.fallback
			}
			return cond(typ, metav1.ConditionFalse, reason, val(c.c.Message))
		}
	}
	if able == nil || active == nil || val(able.Status) == corev1.ConditionUnknown || val(active.Status) == corev1.ConditionUnknown {
		return cond(typ, metav1.ConditionUnknown, "Pending", "the HorizontalPodAutoscaler controller has not evaluated it yet")
	}
	return cond(typ, metav1.ConditionTrue, "ScalingActive", val(active.Message))
}

// writeStatus server-side applies the status subresource only when the computed status differs
// from the stored one (lastReconcileTime aside); a condition keeps its lastTransitionTime while
// its status stays (meta.SetStatusCondition).
func (r *InferenceServiceReconciler) writeStatus(ctx context.Context, isvc *unstructured.Unstructured, next Status) (bool, error) {
	var old Status
	if raw, ok, _ := unstructured.NestedMap(isvc.Object, "status"); ok {
		if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(raw, &old); err != nil {
			return false, fmt.Errorf("decoding status: %w", err)
		}
	}
	want := next.Conditions
	next.Conditions = slices.Clone(old.Conditions)
	for _, c := range want {
		meta.SetStatusCondition(&next.Conditions, c)
	}
	next.LastReconcileTime = old.LastReconcileTime
	if equality.Semantic.DeepEqual(old, next) {
		return false, nil
	}
	next.LastReconcileTime = time.Now().UTC().Format(time.RFC3339)
	raw, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(&next)
	if err != nil {
		return false, err
	}
	u := newInferenceService()
	u.SetName(isvc.GetName())
	u.SetNamespace(isvc.GetNamespace())
	if err := unstructured.SetNestedField(u.Object, raw, "status"); err != nil {
		return false, err
	}
	if err := r.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), fieldOwner, client.ForceOwnership); err != nil {
		return false, fmt.Errorf("applying status: %w", err)
	}
	return true, nil
}
