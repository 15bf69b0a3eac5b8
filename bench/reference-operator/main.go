// Command reference-operator is a controller-runtime reference implementation of the mlops-platform
// InferenceService operator's core job (the predictor Deployment, Service and HPA, and a Ready
// status), written the way a Go team would on a first try, for side-by-side scale benchmarks.
// See README.md.
package main

import (
	"context"
	"flag"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

func main() {
	var (
		workers          int
		qps              float64
		burst            int
		metricsAddr      string
		probeAddr        string
		leaderElect      bool
		leaderElectionNS string
		namespace        string
	)
	// --kubeconfig is registered by controller-runtime (pkg/client/config); without it KUBECONFIG,
	// then the in-cluster config, then ~/.kube/config are used (ctrl.GetConfigOrDie).
	flag.IntVar(&workers, "workers", 4, "InferenceServices reconciled concurrently (MaxConcurrentReconciles).")
	flag.Float64Var(&qps, "kube-api-qps", 20, "Client-side rate limit of API requests per second.")
	flag.IntVar(&burst, "kube-api-burst", 30, "Client-side burst of API requests.")
	flag.StringVar(&metricsAddr, "metrics-bind-address", "127.0.0.1:8080", "Address of /metrics (plain HTTP); 0 disables it.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", "127.0.0.1:8081", "Address of /healthz and /readyz.")
	flag.BoolVar(&leaderElect, "leader-elect", false, "Elect a leader (a Lease) before reconciling.")
	flag.StringVar(&leaderElectionNS, "leader-election-namespace", "", "Namespace of the Lease (required out of cluster with --leader-elect).")
	flag.StringVar(&namespace, "namespace", "", "Watch only this namespace (default: all).")
	opts := zap.Options{Development: false} // JSON, info
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	setupLog := ctrl.Log.WithName("setup")

	cfg := ctrl.GetConfigOrDie()
	cfg.QPS = float32(qps)
	cfg.Burst = burst

	scheme := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		setupLog.Error(err, "building the scheme")
		os.Exit(1)
	}
	cacheOpts := cache.Options{}
	if namespace != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{namespace: {}}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Cache:                   cacheOpts,
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          leaderElect,
		LeaderElectionID:        "reference-operator.mlops.platform",
		LeaderElectionNamespace: leaderElectionNS,
		// read the (unstructured) InferenceServices from the informer cache too, not from the API
		Client: client.Options{Cache: &client.CacheOptions{Unstructured: true}},
	})
	if err != nil {
		setupLog.Error(err, "creating the manager")
		os.Exit(1)
	}

	r := &InferenceServiceReconciler{
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorderFor("reference-operator"), //nolint:staticcheck // core/v1 Events, as asked
	}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("inferenceservice").
		For(newInferenceService(), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Owns(&autoscalingv2.HorizontalPodAutoscaler{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(r)
	if err != nil {
		setupLog.Error(err, "creating the controller")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		setupLog.Error(err, "adding the health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		setupLog.Error(err, "adding the ready check")
		os.Exit(1)
	}
	// one "caches synced" line once the informers of every watched kind have listed (what the
	// benchmark waits for, as with our operator)
	err = mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		for _, obj := range []client.Object{newInferenceService(), &appsv1.Deployment{}, &corev1.Service{}, &autoscalingv2.HorizontalPodAutoscaler{}} {
			if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
		setupLog.Info("caches synced", "workers", workers, "qps", qps, "burst", burst)
		return nil
	}))
	if err != nil {
		setupLog.Error(err, "adding the cache-sync logger")
		os.Exit(1)
	}

	setupLog.Info("starting the manager", "metrics", metricsAddr, "probes", probeAddr, "leaderElect", leaderElect, "namespace", namespace)
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		setupLog.Error(err, "running the manager")
		os.Exit(1)
	}
}
