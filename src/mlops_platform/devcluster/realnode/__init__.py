"""Real worker nodes beside the kwok nodes of the local cluster (docs/dev-cluster.md, "The real node").

A real node is kubelet + containerd (Debian's runc) + kube-proxy + the CNI plugins, started by
``dev up --real-nodes N`` inside network and mount namespaces of its own, so that pods really run
while the host's own network is left as it was. What runs where:

- :mod:`.addressing`: the cluster's address block and what each address is for (pure);
- :mod:`.netns`: the cluster's *fabric* namespace (one veth to the host, a bridge to the nodes, the
  API server's address) and each node's network + mount namespaces and cgroup root;
- :mod:`.configs`: the kubelet, kube-proxy, containerd and CNI configuration (pure);
- :mod:`.pki`: the node's client certificates and kubeconfigs, signed by the cluster's CA;
- :mod:`.images`: the images the node runs, built locally and imported without any registry;
- :mod:`.node`: starting and stopping a node's processes, and its teardown.
"""
