"""bench/gpu/workloads without a GPU: one registry behind one entry point, the protocol each
family speaks under --dry-run, and no workload started by path or with a private helper."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from bench.gpu.workloads import core, diag, jobs, panel, transfer
from bench.gpu.workloads.__main__ import main
from bench.gpu.workloads.registry import REGISTRY, parser
from testkit.harness import child_env
from tests.conftest import REPO

PACKAGE = REPO / "bench" / "gpu" / "workloads"


@pytest.fixture(autouse=True)
def _restore(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """main() sets the no-multicast environment and signal handlers: put both back."""
    for key in {**core.NO_MULTICAST, **core.DEVICE_ORDER}:
        monkeypatch.delenv(key, raising=False)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in handlers.items():
        signal.signal(sig, handler)


def _events(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_every_workload_an_orchestrator_names_is_registered_once() -> None:
    assert set(panel.WORKLOADS) - set(panel.NO_PROCESS) <= set(REGISTRY)
    assert set(diag.WORKLOADS) <= set(REGISTRY)
    assert set(jobs.WORKLOADS) <= set(REGISTRY)
    assert "transfers" in REGISTRY
    families = {w.family.name for w in REGISTRY.values()}
    assert families == {"panel", "diag", "transfer", "jobs", "split"}


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_each_workload_says_ready_then_done_under_dry_run(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    opts = (["--phases", "hold_1g,pinned_h2d_4k", "--phase-seconds", "0", "--gap", "0"]
            if name == "transfers" else ["--seconds", "0"])
    if REGISTRY[name].family is panel.FAMILY:
        opts += ["--port", "0"]  # the decoder's vLLM-style endpoint on any free port
    assert main([name, "--dry-run", *opts]) == 0
    events = _events(capsys.readouterr().out)
    kinds = [e["event"] for e in events]
    assert kinds[0] == "ready" and kinds[-1] == "done", kinds
    assert events[0]["info"]["dry_run"] is True  # type: ignore[index]
    done = events[-1]
    # the panel's records carry wall_seconds; the other families never did
    assert ("wall_seconds" in done) is (REGISTRY[name].family is panel.FAMILY)
    if name == "transfers":
        assert kinds.count("phase") == kinds.count("phase_done") == 2
        assert done["stats"] == {"phases": 2}
    else:
        assert done["stats"] == {"dry_run": True}


def test_each_family_keeps_its_own_options() -> None:
    args = parser().parse_args(["large_gemm"])
    assert (args.seconds, args.port, args.device) == (30.0, 18080, "cuda")
    args = parser().parse_args(["h2d"])
    assert (args.seconds, args.chunk_mib, args.gap, args.bursts) == (30.0, 256, 6.0, "3:1,3,8")
    args = parser().parse_args(["transfers"])
    assert (args.phase_seconds, args.gap, args.phases) == (7.0, 1.0, "")
    assert not hasattr(args, "seconds")  # the phases pace the run
    with pytest.raises(SystemExit):
        parser().parse_args(["h2d", "--port", "1"])  # a panel option


def test_an_unknown_phase_is_an_error_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["transfers", "--dry-run", "--phases", "hold_1g,nope"]) == 2
    (event,) = _events(capsys.readouterr().out)
    assert event["event"] == "error" and "nope" in str(event["error"])


def test_a_workload_that_fails_says_error_not_a_traceback() -> None:
    # serving without a llama-server URL fails before it says ready, on any machine
    proc = subprocess.run(core.command("serving", "--seconds", "1"), cwd=REPO,
                          env=child_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    (event,) = _events(proc.stdout)
    assert event["event"] == "error" and "--url" in str(event["error"])
    assert "Traceback" not in proc.stderr


def test_the_entry_point_runs_as_a_module() -> None:
    proc = subprocess.run([sys.executable, "-m", "bench.gpu.workloads", "standin_wait",
                           "--dry-run", "--seconds", "0"], cwd=REPO, env=child_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [e["event"] for e in _events(proc.stdout)] == ["ready", "done"]


def test_the_phase_clock_restarts_on_steady_and_shares_the_run_stop() -> None:
    stop = core.Stop()
    clock = transfer.Clock("p", 0.0, stop.event)
    assert clock()  # a zero-second phase is over at once
    clock.seconds = 60.0
    clock.restart()
    assert not clock()
    stop.event.set()
    assert clock()  # SIGTERM on the run stops the phase


def test_one_copy_of_each_helper_and_no_workload_started_by_path() -> None:
    helpers = ("emit", "host_work", "load_torch", "device_info", "_host_work", "_device_info")
    for path in PACKAGE.glob("*.py"):
        if path.name == "core.py":
            continue
        for helper in helpers:
            assert not re.search(rf"^def {helper}\(", path.read_text(), re.M), (path, helper)
    assert not list((REPO / "bench" / "gpu").glob("*workloads*.py"))
    starters = [p for p in (REPO / "bench").rglob("*.py") if "workloads" not in p.parts]
    starters += list((REPO / "bench").rglob("*.sh"))
    for path in starters:
        assert not re.search(r"workloads?\.py\b", path.read_text()), path
