"""Pod-label source against a real aiohttp server on loopback answering like the API
server (pod list, 403, garbage, a hang), and what the job names do downstream: job_name on
goodput_gpu_pod_info and two pods of one job judged together by the model."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from exporter.metrics.encode import Encoder
from exporter.metrics.families import erase
from exporter.readings import ContainerGpus, Device, NvmlReading, PodAssignments, PodJobs
from exporter.snapshot import Snapshot, SourceResult
from exporter.sources.kubernetes.config import KubernetesConfig
from exporter.sources.kubernetes.families import families
from exporter.sources.kubernetes.podlabels import PodLabelSource, job_names

TOKEN = "sa-token-1"
JOB_LABELS = KubernetesConfig().job_labels


def pod_item(namespace: str, name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name, "labels": labels}}


@dataclass
class ApiServer:
    """Answers GET /api/v1/pods the way the API server does, or misbehaves on demand."""

    mode: str = "ok"
    items: list[dict[str, Any]] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def pods(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(
            (request.query.get("fieldSelector", ""), request.headers.get("Authorization", ""))
        )
        if self.mode == "forbidden" or request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return web.json_response({"kind": "Status", "code": 403}, status=403)
        if self.mode == "garbage":
            return web.Response(body=b"\x00<html>not json", content_type="application/json")
        if self.mode == "hang":
            await self.release.wait()  # until the test is over
        return web.json_response({"kind": "PodList", "items": self.items})


@pytest.fixture
async def api() -> AsyncIterator[tuple[ApiServer, str]]:
    server = ApiServer()
    app = web.Application()
    app.router.add_get("/api/v1/pods", server.pods)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield server, f"http://127.0.0.1:{port}"
    server.release.set()
    await runner.cleanup()


def config(tmp_path: Path, url: str, **kw: Any) -> KubernetesConfig:
    token = tmp_path / "token"
    if not token.exists():
        token.write_text(TOKEN + "\n")
    return KubernetesConfig(
        enabled=True, pod_labels=True, api_server=url, token_path=str(token), **kw
    )


def reason(result: SourceResult) -> str:
    [available] = result.availability
    assert available.source == "pod_labels"
    return available.reason


async def test_lists_this_nodes_pods_and_names_their_jobs(
    tmp_path: Path, api: tuple[ApiServer, str]
) -> None:
    server, url = api
    server.items = [
        pod_item("ml", "train-0", {"batch.kubernetes.io/job-name": "train"}),
        # the first configured label a pod carries wins
        pod_item(
            "ml",
            "js-0",
            {"training.kubeflow.org/job-name": "kf", "jobset.sigs.k8s.io/jobset-name": "js"},
        ),
        pod_item("infer", "vllm-0", {"app": "vllm"}),  # no job label: not named
    ]
    src = PodLabelSource(config(tmp_path, url), node_name="node-a")
    result = await src.poll()
    await src.close()
    assert result.ok and reason(result) == ""
    assert result.reading == PodJobs({("ml", "train-0"): "train", ("ml", "js-0"): "js"})
    assert server.requests == [("spec.nodeName=node-a", f"Bearer {TOKEN}")]


@pytest.mark.parametrize(("mode", "why"), [("forbidden", "forbidden"), ("garbage", "invalid")])
async def test_failures_keep_the_last_names(
    tmp_path: Path, api: tuple[ApiServer, str], mode: str, why: str
) -> None:
    server, url = api
    server.items = [pod_item("ml", "train-0", {"batch.kubernetes.io/job-name": "train"})]
    src = PodLabelSource(config(tmp_path, url), node_name="node-a")
    good = await src.poll()
    server.mode = mode
    bad = await src.poll()
    await src.close()
    assert not bad.ok and reason(bad) == why and bad.reason == why
    assert bad.reading == good.reading  # a pod's job label does not change while it runs


async def test_a_hanging_api_server_times_out(tmp_path: Path, api: tuple[ApiServer, str]) -> None:
    server, url = api
    server.mode = "hang"
    src = PodLabelSource(config(tmp_path, url, pod_labels_timeout=0.3), node_name="n")
    result = await asyncio.wait_for(src.poll(), timeout=5)
    await src.close()
    assert not result.ok and reason(result) == "timeout" and result.reading is None


async def test_no_token_and_no_api_server(
    tmp_path: Path, api: tuple[ApiServer, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, url = api
    cfg = config(tmp_path, url).model_copy(update={"token_path": str(tmp_path / "none")})
    result = await PodLabelSource(cfg, node_name="n").poll()
    assert not result.ok and reason(result) == "no_token"
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    in_cluster = PodLabelSource(config(tmp_path, ""), node_name="n")
    assert reason(await in_cluster.poll()) == "unavailable"


async def test_connection_refused_is_unavailable(tmp_path: Path) -> None:
    src = PodLabelSource(config(tmp_path, "http://127.0.0.1:1"), node_name="n")
    result = await src.poll()
    await src.close()
    assert reason(result) == "unavailable"


def test_job_names_rejects_what_is_not_a_pod_list() -> None:
    bodies: list[object] = [[], {"kind": "Status"}, {"items": [1]}, {"items": [{"metadata": {}}]}]
    for body in bodies:
        with pytest.raises(ValueError):
            job_names(body, JOB_LABELS)


def test_job_name_reaches_the_pod_info_series() -> None:
    pods = PodAssignments(
        (
            ContainerGpus("ml", "train-0", "main", "nvidia.com/gpu", ("GPU-0",), ("0",)),
            ContainerGpus("infer", "vllm-0", "server", "nvidia.com/gpu", ("GPU-1",), ("1",)),
        )
    )
    inventory = tuple(Device(g, f"GPU-{g}", "H100") for g in ("0", "1"))
    snap = Snapshot(
        node_name="node-a",
        results={
            "nvml": SourceResult(source="nvml", reading=NvmlReading(inventory=inventory)),
            "kubelet": SourceResult(source="kubelet", reading=pods),
            "pod_labels": SourceResult(
                source="pod_labels", reading=PodJobs({("ml", "train-0"): "train"})
            ),
        },
    )
    encoder = Encoder([erase(g) for g in families()], CollectorRegistry(auto_describe=False))
    text = encoder.encode(snap).decode()
    assert (
        'gpu="0",node="node-a",namespace="ml",pod="train-0",container="main",job_name="train"'
        in text
    )
    assert 'pod="vllm-0",container="server",job_name=""' in text


def test_debug_state_names_pods_plainly() -> None:
    snap = Snapshot(
        node_name="n",
        results={
            "pod_labels": SourceResult(source="pod_labels", reading=PodJobs({("ml", "a"): "j"}))
        },
    )
    assert snap.to_json()["sources"]["pod_labels"]["jobs"] == {"ml/a": "j"}


def real_size_pod(namespace: str, name: str, job: str) -> dict[str, Any]:
    """A pod as the API server lists it: managed fields, a spec and a status make each one
    several KB (a list of 40 passed the ~128 KB a single buffered read returns)."""
    return {
        "metadata": {
            "namespace": namespace, "name": name, "uid": f"uid-{name}",
            "labels": {"batch.kubernetes.io/job-name": job, "app": "trainer"},
            "annotations": {f"note-{i}": "x" * 80 for i in range(10)},
            "managedFields": [
                {"manager": "kubelet", "fieldsV1": {f"f:{i}": {} for i in range(60)}}
            ],
        },
        "spec": {"nodeName": "node-a", "containers": [
            {"name": "c", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
             "env": [{"name": f"E{i}", "value": "v" * 40} for i in range(30)]}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}] * 5},
    }


async def test_a_real_size_list_of_500_pods_is_read_whole(
    tmp_path: Path, api: tuple[ApiServer, str]
) -> None:
    """[tenancy] ``resp.content.read(n)`` returned only what was buffered: a pod list over
    ~128 KB read as ``invalid`` and job names never loaded on busy nodes."""
    server, url = api
    server.items = [real_size_pod("ml", f"train-{i}", f"job-{i % 7}") for i in range(500)]
    size = len(json.dumps({"kind": "PodList", "items": server.items}))
    assert size > 2 * 1024 * 1024  # far past one buffered read
    src = PodLabelSource(config(tmp_path, url), node_name="node-a")
    try:
        result = await src.poll()
    finally:
        await src.close()
    assert result.ok and reason(result) == "", result.error
    assert result.reading is not None and len(result.reading.jobs) == 500
    assert result.reading.jobs[("ml", "train-499")] == "job-2"


async def test_a_pod_list_past_the_cap_is_refused(
    tmp_path: Path, api: tuple[ApiServer, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from exporter.sources.kubernetes import podlabels

    server, url = api
    server.items = [real_size_pod("ml", f"p{i}", "j") for i in range(50)]
    monkeypatch.setattr(podlabels, "MAX_BYTES", 64 * 1024)
    src = PodLabelSource(config(tmp_path, url), node_name="node-a")
    try:
        result = await src.poll()
    finally:
        await src.close()
    assert not result.ok and reason(result) == "invalid" and "65536 bytes" in result.error


def test_pod_ips_come_from_the_same_list() -> None:
    """status.podIP is where a pod's own ports are reached (NCCL's RAS port); a pod not yet
    given one, or given something that is not an address, is left out."""
    from exporter.sources.kubernetes.podlabels import pod_ips

    body = {"items": [
        {"metadata": {"namespace": "ml", "name": "a"}, "status": {"podIP": "10.1.2.3"}},
        {"metadata": {"namespace": "ml", "name": "b"}, "status": {"podIP": "fd00::5"}},
        {"metadata": {"namespace": "ml", "name": "c"}, "status": {}},
        {"metadata": {"namespace": "ml", "name": "d"}, "status": {"podIP": "$(rm -rf)"}},
    ]}
    assert pod_ips(body) == {("ml", "a"): "10.1.2.3", ("ml", "b"): "fd00::5"}
