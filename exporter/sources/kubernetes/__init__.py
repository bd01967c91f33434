"""Kubernetes attribution: GPUs to pods (kubelet pod-resources API, :mod:`.kubelet`) and GPU
processes to pods (cgroups, :mod:`.processes`). See docs/kubernetes.md.

``exporter/collectors.py`` wires both sources (the ``kubelet`` and ``cgroup`` collectors) and
the families of :mod:`.families`; nothing here is imported unless Kubernetes is enabled, so
a node without it never loads gRPC.
"""
