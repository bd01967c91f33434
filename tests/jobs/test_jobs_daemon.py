"""Jobs without Kubernetes, end to end: the daemon on the simulated node reads its generated
/proc through the same source a real node uses and publishes the Slurm job and the process
sessions on goodput_gpu_job_info; the model's step ranks identities once per GPU."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from exporter.model.job_identity import resolve
from exporter.readings import (
    KUBERNETES_JOBS,
    ContainerGpus,
    JobAssignments,
    PodAssignments,
)
from exporter.sim.fake_nvml import simulated_node
from exporter.sim.patterns import NODE, SLURM_JOB
from exporter.snapshot import Snapshot, SourceResult
from exporter.sources.jobs.hpc import HPC
from exporter.sources.jobs.identity import PROCESS, SLURM
from exporter.sources.nvml_session import NvmlSession
from exporter.wiring.config import Settings
from exporter.wiring.daemon import build


async def test_the_simulated_node_publishes_its_slurm_job() -> None:
    settings = Settings(simulate=True, node_name="simnode")
    daemon = build(settings, NvmlSession(simulated_node(), "simulated"))
    client = TestClient(TestServer(daemon.app()))
    await client.start_server()
    try:
        deadline = time.monotonic() + 20
        body = ""
        while time.monotonic() < deadline and 'goodput_job_gpus{' not in body:
            await asyncio.sleep(0.2)
            body = await (await client.get("/metrics")).text()
    finally:
        await client.close()
    info = [line for line in body.splitlines() if line.startswith("goodput_gpu_job_info{")]
    slurm_gpus = [str(i) for i, w in enumerate(NODE) if w.job == SLURM_JOB]
    job_id = dict(SLURM_JOB)["SLURM_JOB_ID"]
    for gpu in slurm_gpus:
        assert (
            f'goodput_gpu_job_info{{gpu="{gpu}",node="simnode",job_source="slurm",'
            f'namespace="",job_id="{job_id}"}} 1' in info
        ), info
    process = [line for line in info if 'job_source="process"' in line]
    busy = sum(1 for w in NODE if w.processes and w.job != SLURM_JOB)
    assert len(process) == busy and all('job_id="simnode/' in line for line in process)
    key = f'job_source="slurm",namespace="",job_id="{job_id}"'
    assert f'goodput_job_gpus{{node="simnode",{key}}} 2' in body
    assert "simulated-secret" not in body


def _snap(*readings: object) -> Snapshot:
    results = {
        f"s{i}": SourceResult(source=f"s{i}", reading=r) for i, r in enumerate(readings)
    }
    return Snapshot(node_name="n", results=results)


def test_jobs_rank_each_identity_by_its_own_source() -> None:
    slurm, session = SLURM.identity("7"), PROCESS.identity("n/1-2")
    procfs = JobAssignments("jobs_proc", {"0": session, "1": slurm, "2": session})
    hpc = JobAssignments("hpc", {"0": HPC.identity("7"), "1": HPC.identity("8")})
    held = ContainerGpus("ns", "pod-a", "c", "nvidia.com/gpu", ("GPU-2",), ("2",))
    pods = PodAssignments((held,))
    for order in ((procfs, hpc, pods), (pods, hpc, procfs)):
        jobs = dict(resolve(_snap(*order)))
        assert jobs == {
            "0": HPC.identity("7"),  # hpc beats a process session
            "1": slurm,  # a Slurm job found in /proc beats the mapping file
            "2": KUBERNETES_JOBS.identity("pod-a", "ns"),  # the kubelet beats everything
        }


def test_settings_choose_the_sources(tmp_path: Path) -> None:
    def names(**jobs: object) -> list[str]:
        settings = Settings(simulate=True, simulate_gpus=1, jobs=jobs)
        daemon = build(settings, NvmlSession(simulated_node(gpus=1), "simulated"))
        return sorted(s.name for s in daemon.sources if s.name.startswith("jobs_"))

    assert names() == ["jobs_proc"]
    assert names(processes=False) == []
    assert names(processes=False, hpc_job_mapping_dir=str(tmp_path)) == ["jobs_hpc"]


def test_proc_root_moves_the_jobs_source_under_simulate(tmp_path: Path) -> None:
    """--proc-root (kubernetes.proc_root) moves the jobs source on the simulated node too,
    so a hostile tree can be tested through the whole daemon."""
    from exporter.collectors.jobs import _proc_root
    from exporter.wiring.config import build as build_settings

    moved = build_settings({"simulate": True, "kubernetes": {"proc_root": str(tmp_path)}})
    assert _proc_root(moved) == (str(tmp_path), None)
    root, tree = _proc_root(build_settings({"simulate": True}))
    assert tree is not None and root != "/proc"
