from __future__ import annotations

import pytest

from exporter.sources.kubernetes.config import KubernetesConfig
from exporter.wiring.config import ConfigError, build


def test_defaults() -> None:
    k8s = build({}, environ={}).section(KubernetesConfig)
    assert not k8s.enabled and k8s.interval == 10.0
    assert k8s.kubelet_socket == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert (k8s.namespace_label, k8s.pod_label, k8s.container_label) == (
        "namespace",
        "pod",
        "container",
    )


def test_environment_sets_label_names_and_extras() -> None:
    k8s = build(
        {},
        environ={
            "GOODPUT_KUBERNETES__POD_LABEL": "k8s_pod",
            "GOODPUT_KUBERNETES__RESOURCE_NAMES": "[example.com/gpu]",
        },
    ).section(KubernetesConfig)
    assert k8s.pod_label == "k8s_pod" and k8s.resource_names == ["example.com/gpu"]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"pod_label": "namespace"}, "must differ"),
        ({"container_label": "bad-name"}, "kubernetes.container_label"),
        ({"namespace_label": "node"}, "gpu, uuid or node"),
        ({"interval": 0}, "kubernetes.interval"),
        ({"kubelet_sock": "/x"}, "unknown config key 'kubernetes.kubelet_sock'"),
    ],
)
def test_bad_values_name_the_key(bad: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build({"kubernetes": bad}, environ={})
