"""The local control plane (etcd, kube-apiserver, kcm, scheduler, kwok) used by tests and the demo."""
