"""Job identities are ranked by the strength their source declares (issue #41): one helper
ranks, no central list names the sources, and no source can be outranked by omission."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import exporter.sources
from exporter.model.job_identity import resolve
from exporter.readings import (
    KUBERNETES_JOBS,
    JobAssignments,
    JobIdentity,
    JobSource,
    strongest,
)
from exporter.snapshot import SnapshotStore, SourceResult
from exporter.sources.jobs.identity import PROCESS
from tests.conftest import REPO
from tests.support import lease_jobs


def declared() -> dict[str, JobSource]:
    """Every job source the exporter declares, found where it is declared (the readings
    and each source module): no list is read."""
    modules = [importlib.import_module("exporter.readings")]
    for info in pkgutil.walk_packages(exporter.sources.__path__, "exporter.sources."):
        if "_pb2" not in info.name and not info.name.endswith("gen_protos"):
            modules.append(importlib.import_module(info.name))
    return {v.name: v for m in modules for v in vars(m).values() if isinstance(v, JobSource)}


def documented() -> list[list[str]]:
    """docs/jobs.md's table of job sources, one row of cells each, strongest first."""
    text = (REPO / "docs" / "jobs.md").read_text()
    head = "| `job_source` | found in |"
    table = text[text.index(head):].split("\n\n", 1)[0].splitlines()[2:]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in table]


def test_the_documented_table_is_the_declarations() -> None:
    """docs/jobs.md lists every declared job source, strongest first, with its strength,
    whether it spans nodes and the variables it is read from: derived from the
    declarations, so a new source that is not documented fails here."""
    ranked = sorted(declared().values(), key=lambda s: -s.strength)
    rows = documented()
    assert [row[0] for row in rows] == [f"`{s.name}`" for s in ranked]
    for source, row in zip(ranked, rows, strict=True):
        assert row[-2:] == [str(source.strength), "yes" if source.spans_nodes else "no"], row
        assert all(f"`{v}`" in row[1] for v in source.variables), (source, row[1])


def test_no_two_sources_share_a_strength() -> None:
    sources = [*declared().values(), lease_jobs.LEASE]
    assert len({s.strength for s in sources}) == len(sources), sources


def test_an_identity_cannot_be_made_without_its_strength() -> None:
    """What made a new source silently lose to every built-in one is now a TypeError."""
    with pytest.raises(TypeError):
        JobIdentity("lease", "lease-7")  # type: ignore[call-arg]


def test_a_new_source_outranks_what_it_declares_it_outranks() -> None:
    """The test-only lease source (55) beats the process session (10) on the GPU both
    name, and loses to the kubelet's pods (60): no list was edited for it."""
    store = SnapshotStore("n")
    lease = lease_jobs.LEASE.identity("lease-7")
    store.publish(SourceResult(source="jobs_proc", reading=JobAssignments(
        "jobs_proc", {"0": PROCESS.identity("n/1"), "1": PROCESS.identity("n/2")})))
    store.publish(SourceResult(source="lease", reading=JobAssignments(
        "lease", {"0": lease})))
    assert resolve(store.current) == {"0": lease, "1": PROCESS.identity("n/2")}
    assert strongest([KUBERNETES_JOBS.identity("j", "ns"), lease]) == KUBERNETES_JOBS.identity(
        "j", "ns")
