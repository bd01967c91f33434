"""Pod discovery against kmock: an in-memory Kubernetes API served over real HTTP.

The official client lists and then watches pods on its own thread, exactly as in a
cluster; pods are created and deleted through the same API.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest

from exporter.sources.serving.discovery import PodWatcher, pod_target
from exporter.sources.serving.targets import Target, TargetSet

kubernetes = pytest.importorskip("kubernetes")
pytest.importorskip("kmock")

PREFIX = "serving.goodput.dev/"


def pod(name: str, node: str, notes: dict[str, str], ip: str = "10.1.0.7",
        ports: tuple[int, ...] = (8000,)) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "annotations": notes},
        "spec": {"nodeName": node, "containers": [
            {"name": "engine", "image": "vllm", "ports": [{"containerPort": p} for p in ports]},
        ]},
        "status": {"phase": "Running", "podIP": ip},
    }


@pytest.fixture
def api(kmock: Any) -> Any:
    config = kubernetes.client.Configuration()
    config.host = str(kmock.url).rstrip("/")
    return kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(config))


async def wait_for(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.05)


async def test_watch_follows_annotated_pods_of_this_node(api: Any, kmock: Any) -> None:
    create = api.create_namespaced_pod
    await asyncio.to_thread(create, "ml", pod("other-node", "node-b", {PREFIX + "scrape": "true"}))
    await asyncio.to_thread(create, "ml", pod("plain", "node-a", {}))
    targets = TargetSet([Target("http://127.0.0.1:9/metrics")])
    watcher = PodWatcher(api, "node-a", PREFIX, targets.set_discovered, retry_seconds=0.2)
    watcher.start()
    try:
        await wait_for(lambda: watcher.state == ("ok", ""))
        assert [t.url for t in targets()] == ["http://127.0.0.1:9/metrics"]
        notes = {PREFIX + "scrape": "true", PREFIX + "engine": "trtllm-serve"}
        await asyncio.to_thread(create, "ml", pod("engine-0", "node-a", notes))
        await wait_for(lambda: len(targets()) == 2)
        found = targets()[1]
        assert found.url == "http://10.1.0.7:8000/prometheus/metrics"
        assert (found.namespace, found.pod, found.engine) == ("ml", "engine-0", "trtllm-serve")
        await asyncio.to_thread(api.delete_namespaced_pod, "engine-0", "ml")
        await wait_for(lambda: len(targets()) == 1)
    finally:
        watcher.stop()
    pod_reads = [r for r in kmock if r.method == "GET" and r.url.path == "/api/v1/pods"]
    assert pod_reads and all(
        r.params.get("fieldSelector") == "spec.nodeName=node-a" for r in pod_reads
    )
    assert any(r.params.get("watch") == "true" for r in pod_reads)


async def test_api_down_is_reported_and_retried() -> None:
    config = kubernetes.client.Configuration()
    config.host = "http://127.0.0.1:9"  # nothing listens on the discard port
    api = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(config))
    watcher = PodWatcher(api, "node-a", PREFIX, lambda _: None, retry_seconds=0.1)
    watcher.start()
    try:
        await wait_for(lambda: watcher.state == ("down", "api_error"))
    finally:
        watcher.stop()


def _pod_obj(notes: dict[str, str], ip: str = "10.1.0.7", ports: tuple[int, ...] = (8000,),
             node: str = "node-a") -> Any:
    """A V1Pod as the client hands it to the watcher."""
    k = kubernetes.client
    return k.V1Pod(
        metadata=k.V1ObjectMeta(name="p", namespace="ml", annotations=notes),
        spec=k.V1PodSpec(node_name=node, containers=[k.V1Container(
            name="engine", ports=[k.V1ContainerPort(container_port=p) for p in ports])]),
        status=k.V1PodStatus(phase="Running", pod_ip=ip),
    )


@pytest.mark.parametrize(
    ("notes", "invalid"),
    [
        ({"port": "http"}, "is not a port number"),
        ({"port": "70000"}, "is not a port number"),
        ({"scheme": "ftp"}, "is not http or https"),
    ],
)
def test_bad_annotations_make_an_unscrapable_target(notes: dict[str, str], invalid: str) -> None:
    full = {PREFIX + "scrape": "true", **{PREFIX + k: v for k, v in notes.items()}}
    target = pod_target(_pod_obj(full), "node-a", PREFIX)
    assert target is not None and invalid in target.invalid


def test_annotation_defaults_and_ipv6() -> None:
    notes = {PREFIX + "scrape": "TRUE", PREFIX + "gpus": "0, GPU-9", PREFIX + "model": "m"}
    target = pod_target(_pod_obj(notes, ip="fd00::5", ports=(30000,)), "node-a", PREFIX)
    assert target is not None and not target.invalid
    assert target.url == "http://[fd00::5]:30000/metrics"
    assert (target.gpus, target.model) == (("0", "GPU-9"), "m")
    assert pod_target(_pod_obj({PREFIX + "scrape": "false"}), "node-a", PREFIX) is None
    assert pod_target(_pod_obj({PREFIX + "scrape": "true"}), "node-b", PREFIX) is None
