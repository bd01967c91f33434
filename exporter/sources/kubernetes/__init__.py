"""Kubernetes attribution: GPUs to pods (kubelet pod-resources API, :mod:`.kubelet`) and GPU
processes to pods (cgroups, :mod:`.processes`). See docs/kubernetes.md.

The ``kubelet`` and ``cgroup`` collectors (``exporter/collectors/kubelet.py``, which also
holds the ``kubernetes`` settings section, and ``exporter/collectors/cgroup.py``) wire both
sources and the families of :mod:`.families`; nothing here is imported unless Kubernetes is
enabled, so a node without it never loads gRPC.
"""
