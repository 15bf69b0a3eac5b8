package main

// The children of an InferenceService, as typed apply configurations: the same objects as
// src/mlops_platform/controllers/inferenceservice/children/{deployment,service,hpa}.py build
// (golden files: tests/unit/controllers/golden/), for the built-in runtime table of servers.py.

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	autoscalingv2ac "k8s.io/client-go/applyconfigurations/autoscaling/v2"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
)

const (
	group         = "mlops.platform"
	component     = "predictor"
	containerName = "predictor"
	modelVolume   = "model-store"
	modelDir      = "/mnt/models"
	// model delivery (deployment._delivery, _storage_initializer): an s3/gs/http(s) model is fetched
	// by an init container into an emptyDir the server mounts read-only
	storageInitializer      = "storage-initializer"
	storageInitializerImage = "mlops-platform:0.1.0" // the operator's default (cli.DEFAULT_STORAGE_INITIALIZER_IMAGE)
	scratchVolume           = "storage-scratch"
	scratchDir              = "/tmp"
	gpuResource             = "nvidia.com/gpu"
	managedBy               = "mlops-platform"
	partOf                  = "mlops-platform"
	modelURIAnno            = group + "/model-uri"
)

// Spec is the part of the mlops.platform/v1 InferenceService spec the children are built from (the
// CRD defaults predictor.port 8080 and predictor.autoscaling minReplicas 1, maxReplicas 1 on the
// server). Quantities decode from strings ("500m") and integers (a GPU count) alike.
type Spec struct {
	Predictor Predictor `json:"predictor"`
}

// Predictor is the model server of the stable model.
type Predictor struct {
	Model       Model       `json:"model"`
	Runtime     string      `json:"runtime"`
	Port        int32       `json:"port"`
	Resources   Resources   `json:"resources,omitempty"`
	Autoscaling Autoscaling `json:"autoscaling"`
}

// Model is where the model is (its format does not change the children of the built-in runtimes).
type Model struct {
	URI string `json:"uri"`
}

// Resources of each predictor replica: any resource name, GPUs included (nvidia.com/gpu).
type Resources struct {
	Requests corev1.ResourceList `json:"requests,omitempty"`
	Limits   corev1.ResourceList `json:"limits,omitempty"`
}

// Autoscaling is the replica bounds (the utilization targets and scale-to-zero are not done here).
type Autoscaling struct {
	MinReplicas int32 `json:"minReplicas"`
	MaxReplicas int32 `json:"maxReplicas"`
}

// gpus per replica: the nvidia.com/gpu limit, else its request, else 0 (internal.ResourceRequirements.gpus).
func (r Resources) gpus() int64 {
	if q, ok := r.Limits[gpuResource]; ok {
		return q.Value()
	}
	if q, ok := r.Requests[gpuResource]; ok {
		return q.Value()
	}
	return 0
}

type probe struct {
	path             string
	failureThreshold int32
}

type namedPort struct {
	name string
	port int32
}

// runtime is one row of the runtime table (servers.py default_table).
type runtime struct {
	server        string
	image         string
	gpuImage      string
	command       []string
	args          []string // templates: {port}, {model_dir}, {<name>_port}
	env           [][2]string
	ports         []namedPort // exposed besides http, in order
	internalPorts []namedPort // bound by the server, not exposed
	modelLayout   string      // the storage initializer's --layout
	readiness     probe
	liveness      probe
	startup       probe
}

const startupFailures = 60

var (
	readyV2   = probe{"/v2/health/ready", 3}
	liveV2    = probe{"/v2/health/live", 3}
	startupV2 = probe{"/v2/health/live", startupFailures}
)

const tsConfig = "mkdir -p /tmp/ts && printf '%s\\n'" +
	" 'inference_address=http://0.0.0.0:{port}'" +
	" 'management_address=http://127.0.0.1:{management_port}'" +
	" 'metrics_address=http://0.0.0.0:{metrics_port}' 'metrics_mode=prometheus'" +
	" 'grpc_inference_port={grpc_port}' 'grpc_management_port={grpc_management_port}'" +
	" > /tmp/ts/config.properties" +
	" && exec torchserve --start --foreground --ncs --disable-token-auth" +
	" --model-store={model_dir} --models=all --ts-config=/tmp/ts/config.properties"

var runtimes = map[string]runtime{
	"triton": {
		server: "tritonserver",
		image:  "nvcr.io/nvidia/tritonserver:25.06-py3",
		args: []string{"tritonserver", "--model-repository={model_dir}", "--http-port={port}",
			"--grpc-port={grpc_port}", "--metrics-port={metrics_port}"},
		ports:       []namedPort{{"grpc", 8001}, {"metrics", 8002}},
		modelLayout: "triton",
		readiness:   readyV2, liveness: liveV2, startup: startupV2,
	},
	"seldon": {
		server: "mlserver",
		image:  "docker.io/seldonio/mlserver:1.7.1",
		args:   []string{"mlserver", "start", "{model_dir}"},
		env: [][2]string{
			{"MLSERVER_HTTP_PORT", "{port}"},
			{"MLSERVER_GRPC_PORT", "{grpc_port}"},
			{"MLSERVER_METRICS_PORT", "{metrics_port}"},
			{"MLSERVER_MODELS_DIR", "{model_dir}"},
		},
		ports:       []namedPort{{"grpc", 8081}, {"metrics", 8082}},
		modelLayout: "mlserver",
		readiness:   readyV2, liveness: liveV2, startup: startupV2,
	},
	"torchserve": {
		server:        "torchserve",
		image:         "docker.io/pytorch/torchserve:0.12.0-cpu",
		gpuImage:      "docker.io/pytorch/torchserve:0.12.0-gpu",
		command:       []string{"/bin/sh", "-c"},
		args:          []string{tsConfig},
		ports:         []namedPort{{"grpc", 7070}, {"metrics", 8082}},
		internalPorts: []namedPort{{"management", 8081}, {"grpc_management", 7071}},
		modelLayout:   "torchserve",
		readiness:     probe{"/ping", 3}, liveness: probe{"/ping", 3}, startup: probe{"/ping", startupFailures},
	},
}

// Same for every runtime of the built-in table.
const (
	runAsUser                   int64 = 1000
	terminationGracePeriod      int64 = 60
	progressDeadlineSeconds     int32 = 900
	revisionHistoryLimit        int32 = 5
	targetCPUUtilization        int32 = 80
	metricsPath                       = "/metrics"
	defaultCPURequest                 = "1"
	defaultMemoryRequest              = "2Gi"
	probePeriodSeconds          int32 = 10
	probeTimeoutSeconds         int32 = 5
	deploymentAPIVersion              = "apps/v1"
	deploymentKind                    = "Deployment"
	metricsPortName                   = "metrics"
	httpPortName                      = "http"
	hpaMetricResourceName             = corev1.ResourceCPU
	rollingUpdateMaxSurge             = "25%"
	rollingUpdateMaxUnavailable       = 0
)

func (rt runtime) render(s string, port int32) string {
	pairs := []string{"{port}", fmt.Sprint(port), "{model_dir}", modelDir}
	for _, p := range append(append([]namedPort{}, rt.internalPorts...), rt.ports...) {
		pairs = append(pairs, "{"+p.name+"_port}", fmt.Sprint(p.port))
	}
	return strings.NewReplacer(pairs...).Replace(s)
}

func (rt runtime) port(name string) (int32, bool) {
	for _, p := range rt.ports {
		if p.name == name {
			return p.port, true
		}
	}
	return 0, false
}

// owner is what the children need of their InferenceService.
type owner struct {
	apiVersion, kind, name, namespace, uid string
	spec                                   Spec
}

func childName(o owner) string { return o.name + "-" + component }

func selectorLabels(o owner) map[string]string {
	return map[string]string{group + "/inferenceservice": o.name, group + "/component": component}
}

func childLabels(o owner, rt runtime) map[string]string {
	l := selectorLabels(o)
	l["app"] = o.name
	l[group+"/framework"] = o.spec.Predictor.Runtime
	l["app.kubernetes.io/name"] = rt.server
	l["app.kubernetes.io/instance"] = o.name
	l["app.kubernetes.io/component"] = component
	l["app.kubernetes.io/managed-by"] = managedBy
	l["app.kubernetes.io/part-of"] = partOf
	l[group+"/shard-bucket"] = bucket(o)
	return l
}

// bucket is runtime.control.sharding.bucket_of: the first 8 bytes (big endian) of the SHA-256 of
// namespace/name, mod 256 (our sharded replicas watch only their buckets' children).
func bucket(o owner) string {
	sum := sha256.Sum256([]byte(o.namespace + "/" + o.name))
	return strconv.FormatUint(binary.BigEndian.Uint64(sum[:8])%256, 10)
}

func ownerRef(o owner) *metav1ac.OwnerReferenceApplyConfiguration {
	return metav1ac.OwnerReference().
		WithAPIVersion(o.apiVersion).WithKind(o.kind).WithName(o.name).
		WithUID(types.UID(o.uid)).WithController(true).WithBlockOwnerDeletion(true)
}

// hpaOwnsReplicas: maxReplicas > minReplicas >= 1 (base.replica_owner).
func hpaOwnsReplicas(s Spec) bool {
	a := s.Predictor.Autoscaling
	return a.MaxReplicas > a.MinReplicas && a.MinReplicas >= 1
}

// buildDeployment is deployment.build + deployment.settle: with an HPA the live replica count
// (minReplicas for a new Deployment), else minReplicas.
func buildDeployment(o owner, rt runtime, live *appsv1.Deployment) (*appsv1ac.DeploymentApplyConfiguration, error) {
	s := o.spec
	replicas := s.Predictor.Autoscaling.MinReplicas
	if hpaOwnsReplicas(s) && live != nil && live.Spec.Replicas != nil {
		replicas = *live.Spec.Replicas
	}
	ctr, err := buildContainer(o, rt)
	if err != nil {
		return nil, err
	}
	podAnnotations := map[string]string{
		modelURIAnno: s.Predictor.Model.URI,
		"kubectl.kubernetes.io/default-container": containerName,
	}
	if mp, ok := rt.port(metricsPortName); ok {
		podAnnotations["prometheus.io/scrape"] = "true"
		podAnnotations["prometheus.io/port"] = fmt.Sprint(mp)
		podAnnotations["prometheus.io/path"] = metricsPath
	}
	pod := corev1ac.PodSpec().
		WithEnableServiceLinks(false).
		WithAutomountServiceAccountToken(false).
		WithTerminationGracePeriodSeconds(terminationGracePeriod).
		WithSecurityContext(corev1ac.PodSecurityContext().
			WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault)).
			WithRunAsNonRoot(true).
			WithRunAsUser(runAsUser)).
		WithInitContainers(buildInitializer(o, rt)).
		WithContainers(ctr).
		WithVolumes(
			corev1ac.Volume().WithName(modelVolume).WithEmptyDir(corev1ac.EmptyDirVolumeSource()),
			corev1ac.Volume().WithName(scratchVolume).WithEmptyDir(corev1ac.EmptyDirVolumeSource()))
	if s.Predictor.Resources.gpus() > 0 {
		pod.WithTolerations(corev1ac.Toleration().
			WithKey(gpuResource).WithOperator(corev1.TolerationOpExists).WithEffect(corev1.TaintEffectNoSchedule))
	}
	return appsv1ac.Deployment(childName(o), o.namespace).
		WithLabels(childLabels(o, rt)).
		WithAnnotations(map[string]string{modelURIAnno: s.Predictor.Model.URI}).
		WithOwnerReferences(ownerRef(o)).
		WithSpec(appsv1ac.DeploymentSpec().
			WithReplicas(replicas).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(selectorLabels(o))).
			WithStrategy(appsv1ac.DeploymentStrategy().
				WithType(appsv1.RollingUpdateDeploymentStrategyType).
				WithRollingUpdate(appsv1ac.RollingUpdateDeployment().
					WithMaxSurge(intstr.FromString(rollingUpdateMaxSurge)).
					WithMaxUnavailable(intstr.FromInt32(rollingUpdateMaxUnavailable)))).
			WithRevisionHistoryLimit(revisionHistoryLimit).
			WithProgressDeadlineSeconds(progressDeadlineSeconds).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(childLabels(o, rt)).
				WithAnnotations(podAnnotations).
				WithSpec(pod))), nil
}

func buildContainer(o owner, rt runtime) (*corev1ac.ContainerApplyConfiguration, error) {
	p := o.spec.Predictor
	image := rt.image
	if p.Resources.gpus() > 0 && rt.gpuImage != "" {
		image = rt.gpuImage
	}
	c := corev1ac.Container().WithName(containerName).WithImage(image)
	for _, cmd := range rt.command {
		c.WithCommand(rt.render(cmd, p.Port))
	}
	for _, a := range rt.args {
		c.WithArgs(rt.render(a, p.Port))
	}
	c.WithEnv(corev1ac.EnvVar().WithName("MODEL_URI").WithValue(p.Model.URI))
	for _, kv := range rt.env {
		c.WithEnv(corev1ac.EnvVar().WithName(kv[0]).WithValue(rt.render(kv[1], p.Port)))
	}
	c.WithPorts(corev1ac.ContainerPort().WithName(httpPortName).WithContainerPort(p.Port).WithProtocol(corev1.ProtocolTCP))
	for _, p := range rt.ports {
		c.WithPorts(corev1ac.ContainerPort().WithName(p.name).WithContainerPort(p.port).WithProtocol(corev1.ProtocolTCP))
	}
	c.WithReadinessProbe(buildProbe(rt.readiness)).
		WithLivenessProbe(buildProbe(rt.liveness)).
		WithStartupProbe(buildProbe(rt.startup))
	c.WithResources(buildResources(p.Resources))
	return c.
		WithSecurityContext(corev1ac.SecurityContext().
			WithAllowPrivilegeEscalation(false).
			WithCapabilities(corev1ac.Capabilities().WithDrop("ALL"))).
		WithVolumeMounts(corev1ac.VolumeMount().WithName(modelVolume).WithMountPath(modelDir).WithReadOnly(true)).
		WithImagePullPolicy(corev1.PullIfNotPresent).
		WithTerminationMessagePolicy(corev1.TerminationMessageFallbackToLogsOnError), nil
}

// buildInitializer is deployment._storage_initializer for a model URI without format, digest,
// credentials, endpoint or region (the benchmark's s3:// models), under the restricted profile.
func buildInitializer(o owner, rt runtime) *corev1ac.ContainerApplyConfiguration {
	return corev1ac.Container().WithName(storageInitializer).WithImage(storageInitializerImage).
		WithImagePullPolicy(corev1.PullIfNotPresent).
		WithCommand("python", "-m", "mlops_platform.storage").
		WithArgs("fetch", o.spec.Predictor.Model.URI, modelDir, "--layout", rt.modelLayout, "--name", o.name).
		WithResources(corev1ac.ResourceRequirements().
			WithRequests(corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("100m"),
				corev1.ResourceMemory: resource.MustParse("128Mi"),
			}).
			WithLimits(corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")})).
		WithSecurityContext(corev1ac.SecurityContext().
			WithAllowPrivilegeEscalation(false).
			WithCapabilities(corev1ac.Capabilities().WithDrop("ALL")).
			WithReadOnlyRootFilesystem(true).
			WithRunAsNonRoot(true).
			WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName(modelVolume).WithMountPath(modelDir),
			corev1ac.VolumeMount().WithName(scratchVolume).WithMountPath(scratchDir)).
		WithTerminationMessagePolicy(corev1.TerminationMessageReadFile)
}

func buildProbe(p probe) *corev1ac.ProbeApplyConfiguration {
	return corev1ac.Probe().
		WithHTTPGet(corev1ac.HTTPGetAction().WithPath(p.path).WithPort(intstr.FromString(httpPortName))).
		WithPeriodSeconds(probePeriodSeconds).
		WithTimeoutSeconds(probeTimeoutSeconds).
		WithFailureThreshold(p.failureThreshold)
}

// buildResources: the spec's requests and limits (any resource name, GPUs included); the default
// request (cpu 1, memory 2Gi) fills in a resource the spec sets neither a request nor a limit for.
func buildResources(r Resources) *corev1ac.ResourceRequirementsApplyConfiguration {
	requests, limits := r.Requests.DeepCopy(), r.Limits.DeepCopy()
	if requests == nil {
		requests = corev1.ResourceList{}
	}
	for name, def := range map[corev1.ResourceName]string{corev1.ResourceCPU: defaultCPURequest, corev1.ResourceMemory: defaultMemoryRequest} {
		_, req := requests[name]
		_, lim := limits[name]
		if !req && !lim {
			requests[name] = resource.MustParse(def)
		}
	}
	out := corev1ac.ResourceRequirements()
	if len(requests) > 0 {
		out.WithRequests(requests)
	}
	if len(limits) > 0 {
		out.WithLimits(limits)
	}
	return out
}

func buildService(o owner, rt runtime) *corev1ac.ServiceApplyConfiguration {
	spec := corev1ac.ServiceSpec().
		WithType(corev1.ServiceTypeClusterIP).
		WithSelector(selectorLabels(o)).
		WithPorts(corev1ac.ServicePort().WithName(httpPortName).WithPort(o.spec.Predictor.Port).
			WithTargetPort(intstr.FromString(httpPortName)).WithProtocol(corev1.ProtocolTCP))
	if mp, ok := rt.port(metricsPortName); ok {
		spec.WithPorts(corev1ac.ServicePort().WithName(metricsPortName).WithPort(mp).
			WithTargetPort(intstr.FromString(metricsPortName)).WithProtocol(corev1.ProtocolTCP))
	}
	return corev1ac.Service(childName(o), o.namespace).
		WithLabels(childLabels(o, rt)).
		WithOwnerReferences(ownerRef(o)).
		WithSpec(spec)
}

func buildHPA(o owner, rt runtime) *autoscalingv2ac.HorizontalPodAutoscalerApplyConfiguration {
	return autoscalingv2ac.HorizontalPodAutoscaler(childName(o), o.namespace).
		WithLabels(childLabels(o, rt)).
		WithOwnerReferences(ownerRef(o)).
		WithSpec(autoscalingv2ac.HorizontalPodAutoscalerSpec().
			WithScaleTargetRef(autoscalingv2ac.CrossVersionObjectReference().
				WithAPIVersion(deploymentAPIVersion).WithKind(deploymentKind).WithName(childName(o))).
			WithMinReplicas(o.spec.Predictor.Autoscaling.MinReplicas).
			WithMaxReplicas(o.spec.Predictor.Autoscaling.MaxReplicas).
			WithMetrics(autoscalingv2ac.MetricSpec().
				WithType("Resource").
				WithResource(autoscalingv2ac.ResourceMetricSource().
					WithName(hpaMetricResourceName).
					WithTarget(autoscalingv2ac.MetricTarget().
						WithType("Utilization").
						WithAverageUtilization(targetCPUUtilization)))))
}
