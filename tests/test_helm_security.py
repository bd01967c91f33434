"""The chart's security posture: non-root, read-only root, no added capabilities by default;
SYS_ADMIN only for embedded DCGM, SYS_PTRACE only for reading job variables; never
privileged; least RBAC."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.support.helm import VALUE_SETS, by_kind, exporter_container, manifests, one


def pod_spec(objs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(objs, "DaemonSet")["spec"]["template"]["spec"]
    return spec


def config_of(objs: list[dict[str, Any]]) -> dict[str, Any]:
    """The daemon configuration the chart rendered."""
    cm = next(o for o in by_kind(objs, "ConfigMap") if "config.yaml" in o["data"])
    cfg: dict[str, Any] = yaml.safe_load(cm["data"]["config.yaml"])
    return cfg


@pytest.fixture(scope="module")
def defaults() -> list[dict[str, Any]]:
    return manifests()


def test_defaults_are_non_root_read_only_without_caps(defaults: list[dict[str, Any]]) -> None:
    pod = pod_spec(defaults)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = exporter_container(defaults)["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}


def test_defaults_share_nothing_with_the_host(defaults: list[dict[str, Any]]) -> None:
    pod = pod_spec(defaults)
    assert pod.get("hostPID") is False
    assert not pod.get("hostNetwork")
    assert not pod.get("hostIPC")
    assert [v for v in pod["volumes"] if "hostPath" in v] == []
    assert pod["automountServiceAccountToken"] is False
    assert by_kind(defaults, "ClusterRole") == by_kind(defaults, "Role") == []


def test_memory_limit_and_probes(defaults: list[dict[str, Any]]) -> None:
    c = exporter_container(defaults)
    assert c["resources"]["limits"]["memory"] == "128Mi"
    assert "cpu" not in c["resources"]["limits"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert one(defaults, "DaemonSet")["spec"]["updateStrategy"]["type"] == "RollingUpdate"


def test_gpu_node_scheduling_and_node_name(defaults: list[dict[str, Any]]) -> None:
    pod = pod_spec(defaults)
    assert {"key": "nvidia.com/gpu", "operator": "Exists"} in pod["tolerations"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    keys = {e["key"] for t in terms["nodeSelectorTerms"] for e in t["matchExpressions"]}
    assert "nvidia.com/gpu.present" in keys
    env = {e["name"]: e for e in exporter_container(defaults)["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    # The exporter watches GPUs; it must not consume one.
    assert "nvidia.com/gpu" not in str(exporter_container(defaults)["resources"])


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_never_privileged_and_at_most_sys_admin(name: str) -> None:
    values = VALUE_SETS[name]
    objs = manifests(values)
    sc = exporter_container(objs)["securityContext"]
    assert sc["privileged"] is False
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    embedded_dcgm = values.get("profiling", {}).get("mode") == "dcgm" and values.get(
        "profiling", {}).get("dcgm", {}).get("embedded", True)
    job_environ = values.get("jobs", {}).get("readEnviron") and values.get(
        "kubernetes", {}).get("hostPID")
    added = (["SYS_ADMIN"] if embedded_dcgm else []) + (["SYS_PTRACE"] if job_environ else [])
    assert sc["capabilities"].get("add", []) == added


def test_dcgm_through_a_host_engine_stays_non_root() -> None:
    objs = manifests(VALUE_SETS["dcgm-hostengine"])
    assert pod_spec(objs)["securityContext"]["runAsNonRoot"] is True
    assert "add" not in exporter_container(objs)["securityContext"]["capabilities"]
    assert exporter_container(objs)["image"].endswith("-dcgm")


def test_attribution_mounts_pod_resources_read_only_as_uid_0_without_capabilities() -> None:
    objs = manifests(VALUE_SETS["attribution"])
    pod = pod_spec(objs)
    assert pod["securityContext"]["runAsUser"] == 0
    assert pod["hostPID"] is True
    vol = next(v for v in pod["volumes"] if v["name"] == "pod-resources")
    assert vol["hostPath"] == {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}
    mounts = exporter_container(objs)["volumeMounts"]
    mount = next(m for m in mounts if m["name"] == "pod-resources")
    assert mount["readOnly"] is True
    assert exporter_container(objs)["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_rbac_only_with_discovery_and_only_reading_pods() -> None:
    objs = manifests(VALUE_SETS["discovery"])
    role = one(objs, "ClusterRole")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"],
                              "verbs": ["get", "list", "watch"]}]
    binding = one(objs, "ClusterRoleBinding")
    assert binding["subjects"][0]["name"] == one(objs, "ServiceAccount")["metadata"]["name"]
    assert pod_spec(objs)["automountServiceAccountToken"] is True


def test_pod_labels_read_pods_without_watch() -> None:
    """Job names from pod labels need get/list on pods and the token, nothing more."""
    objs = manifests(VALUE_SETS["pod-labels"])
    role = one(objs, "ClusterRole")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"],
                              "verbs": ["get", "list"]}]
    assert pod_spec(objs)["automountServiceAccountToken"] is True


def test_user_values_cannot_add_privilege() -> None:
    from tests.support.helm import helm, render

    errors = helm().HelmValuesError
    for bad in ({"securityContext": {"privileged": True}},
                {"securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}},
                {"securityContext": {"capabilities": {"drop": ["NET_RAW"]}}}):
        with pytest.raises(errors):
            render(bad)


def test_mutual_tls_switches_probes_to_tcp() -> None:
    c = exporter_container(manifests(VALUE_SETS["webconfig"]))
    assert "tcpSocket" in c["livenessProbe"] and "httpGet" not in c["readinessProbe"]
    tls_only = {"webConfig": {"enabled": True, "tls": {"enabled": True, "secretName": "t"}}}
    c = exporter_container(manifests(tls_only))
    assert c["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"


def test_network_policy_admits_only_the_metrics_port() -> None:
    pol = one(manifests(VALUE_SETS["networkpolicy"]), "NetworkPolicy")
    assert pol["spec"]["policyTypes"] == ["Ingress"]
    assert pol["spec"]["ingress"][0]["ports"] == [{"port": "metrics", "protocol": "TCP"}]


def test_job_variables_need_host_pids_and_add_only_sys_ptrace() -> None:
    without_pids = manifests({"jobs": {"readEnviron": True}})
    assert "add" not in exporter_container(without_pids)["securityContext"]["capabilities"]
    assert pod_spec(without_pids)["securityContext"]["runAsUser"] != 0
    assert config_of(without_pids)["jobs"] == {"processes": False, "environ": False}
    objs = manifests(VALUE_SETS["jobs"])
    assert exporter_container(objs)["securityContext"]["capabilities"]["add"] == ["SYS_PTRACE"]
    assert pod_spec(objs)["securityContext"]["runAsUser"] == 0
    jobs = config_of(objs)["jobs"]
    assert jobs["processes"] is True and jobs["environ"] is True
    mount = next(m for m in exporter_container(objs)["volumeMounts"]
                 if m["name"] == "hpc-job-mapping")
    assert mount["readOnly"] is True and jobs["hpc_job_mapping_dir"] == mount["mountPath"]
    volume = next(v for v in pod_spec(objs)["volumes"] if v["name"] == "hpc-job-mapping")
    assert volume["hostPath"] == {"path": "/run/dcgm-job-map", "type": "DirectoryOrCreate"}
