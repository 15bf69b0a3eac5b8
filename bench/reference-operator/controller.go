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

// Status is the part of the InferenceService status this operator writes.
type Status struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Replicas           int32              `json:"replicas"`
	ReadyReplicas      int32              `json:"readyReplicas"`
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
	if hpaOwnsReplicas(spec) {
		if err := r.Apply(ctx, buildHPA(o, rt), fieldOwner, client.ForceOwnership); err != nil {
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

	wrote, err := r.writeStatus(ctx, isvc, readyCondition(isvc.GetGeneration(), spec, deploy, svc), deploy)
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

// writeStatus patches the status subresource only when the computed status differs.
func (r *InferenceServiceReconciler) writeStatus(ctx context.Context, isvc *unstructured.Unstructured, ready metav1.Condition, deploy *appsv1ac.DeploymentApplyConfiguration) (bool, error) {
	var old Status
	if raw, ok, _ := unstructured.NestedMap(isvc.Object, "status"); ok {
		if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructured(raw, &old); err != nil {
			return false, fmt.Errorf("decoding status: %w", err)
		}
	}
	_, _, replicas, _, readyReplicas, _ := deploymentCounts(deploy)
	next := Status{
		ObservedGeneration: isvc.GetGeneration(),
		Replicas:           replicas,
		ReadyReplicas:      readyReplicas,
		Conditions:         slices.Clone(old.Conditions),
	}
	meta.SetStatusCondition(&next.Conditions, ready)
	if equality.Semantic.DeepEqual(old, next) {
		return false, nil
	}
	raw, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(&next)
	if err != nil {
		return false, err
	}
	patch := client.MergeFrom(isvc.DeepCopy())
	if err := unstructured.SetNestedField(isvc.Object, raw, "status"); err != nil {
		return false, err
	}
	if err := r.Status().Patch(ctx, isvc, patch); err != nil {
		return false, fmt.Errorf("patching status: %w", err)
	}
	return true, nil
}
