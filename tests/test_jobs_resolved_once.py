"""Jobs resolved once (issue #52): the model's step ranks every identity source's word once
and publishes the answer with its verdicts, so ``goodput_gpu_job_info`` names the job that
``goodput_job_gpus`` and the other job verdicts judged, in every snapshot, and no scrape
merges or ranks identities again.

Before, the job-info series read a merge made on every read of the latest snapshot while the
verdicts were those of the model's last step: when a GPU's job changed between two steps, a
scrape said the GPUs worked for the new job and judged the old one.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.metrics.encode import Encoder
from exporter.metrics.families import erase
from exporter.model import families as model_families
from exporter.readings import JobAssignments
from exporter.snapshot import Snapshot, SourceResult
from exporter.sources.jobs.identity import SLURM
from tests.test_model_node import Node

ENCODER = Encoder([erase(model_families.JOB_INFO), erase(model_families.NODE)])


def _scrape(snap: Snapshot) -> tuple[dict[str, str], dict[str, float]]:
    """(gpu -> the job_id its info names, job_id -> GPUs the verdicts judged for it)."""
    info: dict[str, str] = {}
    judged: dict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(ENCODER.encode(snap).decode()):
        for s in family.samples:
            if s.name == "goodput_gpu_job_info":
                info[s.labels["gpu"]] = s.labels["job_id"]
            elif s.name == "goodput_job_gpus":
                judged[s.labels["job_id"]] = s.value
    return info, dict(judged)


def _slurm(job: str) -> SourceResult:
    return SourceResult(source="jobs", reading=JobAssignments(
        "slurm", {g: SLURM.identity(job) for g in ("0", "1")}))


def test_job_info_and_the_job_verdicts_come_from_the_same_step() -> None:
    node = Node(gpus=("0", "1"))
    node.store.publish(_slurm("4242"))
    node.run(2)
    assert _scrape(node.store.current) == ({"0": "4242", "1": "4242"}, {"4242": 2.0})
    # the job ends and the next starts on the same GPUs between two model steps: a scrape
    # now still says what the last step judged, not a newer word than its verdicts
    node.store.publish(_slurm("5151"))
    assert _scrape(node.store.current) == ({"0": "4242", "1": "4242"}, {"4242": 2.0})
    node.step()
    assert _scrape(node.store.current) == ({"0": "5151", "1": "5151"}, {"5151": 2.0})


def test_identities_are_ranked_once_per_step_never_on_a_scrape(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from exporter.model import job_identity
    from exporter.readings import strongest as ranked

    calls: list[int] = []

    def counting(identities):  # type: ignore[no-untyped-def]
        calls.append(1)
        return ranked(identities)

    monkeypatch.setattr(job_identity, "strongest", counting)
    node = Node(gpus=("0", "1"))
    node.store.publish(_slurm("4242"))
    node.step()
    assert len(calls) == 2  # one ranking per GPU named, in the step
    for _ in range(3):
        _scrape(node.store.current)
    assert len(calls) == 2  # scrapes read the step's answer
    assert dict(node.store.current.verdicts.gpu_jobs) == {
        "0": SLURM.identity("4242"), "1": SLURM.identity("4242")}


def test_a_snapshot_joins_its_pods_and_their_job_names_once() -> None:
    """The kubelet's assignments meet the pods' job labels once per snapshot, on first read,
    not again on every read of every scrape, step and view."""
    from exporter.readings import ContainerGpus, PodAssignments, PodJobs
    from exporter.snapshot import SnapshotStore

    store = SnapshotStore("n")
    store.publish(SourceResult(source="kubelet", reading=PodAssignments((ContainerGpus(
        "ml", "train-0", "main", "nvidia.com/gpu", ("GPU-0",), ("0",)),))))
    snap = store.publish(SourceResult(source="podlabels", reading=PodJobs(
        {("ml", "train-0"): "llm"})))
    assert snap.pods is snap.pods and snap.pods.containers[0].job == "llm"
    assert snap.inventory is snap.inventory and snap.gpu_states is snap.gpu_states
