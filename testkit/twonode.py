"""One host as two nodes: two daemons, each owning part of the host's GPUs (``--devices``,
its own ``--node-name``), and a real Prometheus scraping both with the mixin's rules and
alerts. A job across the two daemons is then judged the way a job across two machines is:
only through the rules (the cross-node straggler, the GPU-hours it waited, its time split).

    python -m testkit.twonode --devices-a 0,1 --devices-b 2,3 --seconds 300 --out DIR
    python -m testkit.twonode --simulate --devices-a 0-9 --devices-b 10,11 --seconds 60 --out DIR

Without ``--simulate`` the daemons read the real GPUs (start the job on them yourself, before
or right after). ``--prometheus`` names the Prometheus binary (default ``prometheus`` on
PATH). DIR receives the rules, the Prometheus configuration and data, both daemons' logs and
``twonode.json``: what the rules say at the end of the run (:func:`results`).

The rule windows are shortened (``--window``, default 30s) and every ``for:`` capped at
``--for-cap`` (default 10 s) through the mixin's configuration, as ``make stack`` does, so a
run of minutes shows what a day would; the recorded names keep their ``rate5m`` suffix.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from testkit.harness import DaemonProcess, free_port, http_get, stop_process, wait_http

JOB = "gpu-goodput-exporter"  # the scrape job the mixin's default selector names
JOB_LABELS = ("job_source", "namespace", "job_id")
JOB_SECONDS = "goodput_gpu_job_seconds_total"  # each GPU's seconds in its job, by part


@dataclass(frozen=True)
class Plan:
    """What one run starts: the two daemons' GPUs and names, and how the rules run."""

    devices_a: str
    devices_b: str
    seconds: float
    out: Path
    node_a: str = "half-a"
    node_b: str = "half-b"
    simulate: bool = False
    simulate_gpus: int = 12
    interval: float = 1.0
    window: str = "30s"
    for_cap: int = 10
    prometheus: str = "prometheus"


# --- the rules --------------------------------------------------------------------------------

def rule_override(window: str, for_cap: int) -> dict[str, Any]:
    """The mixin configuration of a short run: every window ``window``, every `for:` at most
    ``for_cap`` seconds, the recording groups at Prometheus's evaluation interval."""
    from mixin.config import load, seconds

    cfg = load()
    return {"rule_interval": None,
            "windows": dict.fromkeys(cfg.windows.model_dump(), window),
            "alerts": {name: {"for": f"{int(min(seconds(a.for_), for_cap))}s"}
                       for name, a in cfg.alerts.items()}}


def write_rules(out: Path, window: str, for_cap: int) -> list[str]:
    """The mixin's rule files for this run under ``out``/rules; their paths."""
    from mixin.config import load
    from mixin.render import rule_files

    paths = []
    for rel, text in rule_files(load(rule_override(window, for_cap))).items():
        path = out / "rules" / Path(rel).name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        paths.append(str(path))
    return paths


# --- the processes ----------------------------------------------------------------------------

def daemon_args(plan: Plan, devices: str, node: str) -> list[str]:
    args = ["--devices", devices, "--node-name", node, "--interval", f"{plan.interval:g}",
            "--log-format", "console"]
    if plan.simulate:
        args += ["--simulate", "--simulate-gpus", str(plan.simulate_gpus)]
    return args


def prometheus_config(targets: list[str], rules: list[str], interval: str) -> dict[str, Any]:
    return {"global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": rules,
            "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": targets}]}]}


@contextmanager
def prometheus(binary: str, out: Path, config: dict[str, Any]) -> Iterator[str]:
    """A Prometheus on a free loopback port with ``config``; yields its URL."""
    import yaml

    path = shutil.which(binary) or binary
    (out / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    with (out / "prometheus.log").open("wb") as log:
        proc = subprocess.Popen(
            [path, f"--config.file={out / 'prometheus.yml'}",
             f"--storage.tsdb.path={out / 'prometheus-data'}",
             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_http(url + "/-/ready", timeout=60)
            yield url
        finally:
            stop_process(proc)


@contextmanager
def two_daemons(plan: Plan) -> Iterator[tuple[DaemonProcess, DaemonProcess]]:
    """Both daemons, ready (a GPU source has polled); stopped on exit."""
    with ExitStack() as stack:
        started = []
        for devices, node in ((plan.devices_a, plan.node_a), (plan.devices_b, plan.node_b)):
            proc = DaemonProcess(*daemon_args(plan, devices, node), log=plan.out / f"{node}.log")
            stack.callback(proc.stop)
            proc.start(timeout=60)
            started.append(proc)
        yield started[0], started[1]


# --- what the rules say -----------------------------------------------------------------------

def query(url: str, expr: str) -> list[dict[str, Any]]:
    from urllib.parse import urlencode

    status, body = http_get(f"{url}/api/v1/query?{urlencode({'query': expr})}", timeout=10)
    data = json.loads(body)
    if status != 200 or data.get("status") != "success":
        raise RuntimeError(f"query {expr!r} failed: {body[:300]}")
    return list(data["data"]["result"])


def job_key(labels: dict[str, str]) -> str:
    """``source/namespace/id`` (namespace empty outside Kubernetes)."""
    return "/".join(labels.get(k, "") for k in JOB_LABELS)


def _rows(url: str, expr: str, *keep: str) -> list[dict[str, Any]]:
    """Each series of ``expr``: its job key, the labels ``keep`` and its value."""
    return [{"job": job_key(s["metric"]), **{k: s["metric"].get(k, "") for k in keep},
             "value": round(float(s["value"][1]), 6)} for s in query(url, expr)]


def straggler_results(url: str, seconds: int) -> dict[str, Any]:
    """The straggler rule at the end, how many of the run's rule evaluations named each GPU
    (its gap at least the alert's threshold), the alert's state and the nodes' own names."""
    from mixin import names as N
    from mixin.config import load

    gap = load().alerts["GPUJobStraggler"].thresholds["min_waiting_gap"]
    named = f"count_over_time(({N.JOB_STRAGGLER} >= {gap:g})[{seconds}s:1s])"
    evaluations = f"count_over_time(({N.JOB_WAITING} * 0)[{seconds}s:1s])"
    return {
        "min_waiting_gap": gap,
        "straggler": _rows(url, N.JOB_STRAGGLER, "node", "gpu"),
        "named_evaluations": _rows(url, named, "node", "gpu"),
        "job_evaluations": _rows(url, evaluations),
        "alerts": _rows(url, 'ALERTS{alertname="GPUJobStraggler"}', "node", "gpu",
                        "alertstate"),
        "node_named": _rows(url, "max by (node, gpu, job_source, namespace, job_id) "
                                 "(goodput_job_straggler) == 1", "node", "gpu"),
        "gpu_waiting_share": _rows(url, N.JOB_GPU_WAITING, "node", "gpu"),
    }


def job_results(url: str, seconds: int, step: float) -> dict[str, dict[str, Any]]:
    """Per job: its GPUs and waiting share (the rules, last window), the GPU-hours it waited
    from the rule (one sample per evaluation, as the fleet dashboard's panel reads it) and
    from the counters over the span the rule had values (``rule_seconds``), the waiting share
    of the whole run from the counters, and its time split per part (GPUs, and shares of the
    job's GPU time)."""
    from mixin import names as N

    keys = ", ".join(JOB_LABELS)
    reads = {
        "gpus": f"sum by ({keys}) ({N.JOB_GPU_SECONDS})",
        "waiting_share": N.JOB_WAITING,
        "waited_gpu_hours": f"sum by ({keys}) (sum_over_time({N.JOB_WAITING_GPUS}"
                            f"[{seconds}s])) * {step:g} / 3600",
        "rule_seconds": f"max by ({keys}) (count_over_time({N.JOB_WAITING_GPUS}"
                        f"[{seconds}s])) * {step:g}",
        "waiting_share_run": f'sum by ({keys}) (increase({JOB_SECONDS}{{part="waiting"}}'
                             f'[{seconds}s])) / sum by ({keys}) (increase({JOB_SECONDS}'
                             f'[{seconds}s]))',
    }
    jobs: dict[str, dict[str, Any]] = {}
    for name, expr in reads.items():
        for row in _rows(url, expr):
            jobs.setdefault(row["job"], {})[name] = row["value"]
    for row in _rows(url, N.JOB_GPU_SECONDS, "part"):
        job = jobs.setdefault(row["job"], {})
        job.setdefault("split", {})[row["part"]] = row["value"]
        gpus = job.get("gpus") or 0
        job.setdefault("split_share", {})[row["part"]] = (
            round(row["value"] / gpus, 4) if gpus else None)
    for key, job in jobs.items():
        span = int(job.get("rule_seconds") or 0)
        if span:
            job["waited_gpu_hours_counters"] = _counter_hours(url, key, span)
    return jobs


def _counter_hours(url: str, key: str, span: int) -> float | None:
    """GPU-hours the job's GPUs counted waiting over the last ``span`` seconds."""
    match = ", ".join(f'{label}="{value}"' for label, value in zip(JOB_LABELS, key.split("/", 2),
                                                                    strict=True))
    rows = query(url, f'sum(increase({JOB_SECONDS}{{{match}, part="waiting"}}[{span}s])) / 3600')
    return round(float(rows[0]["value"][1]), 6) if rows else None


def results(url: str, plan: Plan) -> dict[str, Any]:
    seconds = max(int(plan.seconds), 1)
    return {"plan": {**asdict(plan), "out": str(plan.out)},
            **straggler_results(url, seconds),
            "jobs": job_results(url, seconds, plan.interval)}


# --- the run ----------------------------------------------------------------------------------

def warm_up(window: str) -> float:
    """Seconds to let pass before the measured span: one rule window, so that every rate the
    span reads covers a full window (a rate over a window the series is younger than reads
    low)."""
    from mixin.config import seconds

    return seconds(window)


def run(plan: Plan, log: Any = None) -> dict[str, Any]:
    """Start both daemons and Prometheus, warm up one rule window, measure ``plan.seconds``,
    return (and write to ``plan.out``/twonode.json) what the rules say over that span."""
    say = log or (lambda message: print(message, file=sys.stderr, flush=True))
    plan.out.mkdir(parents=True, exist_ok=True)
    rules = write_rules(plan.out, plan.window, plan.for_cap)
    with two_daemons(plan) as (a, b):
        targets = [a.url.removeprefix("http://"), b.url.removeprefix("http://")]
        config = prometheus_config(targets, rules, f"{plan.interval:g}s")
        with prometheus(plan.prometheus, plan.out, config) as url:
            warm = warm_up(plan.window)
            say(f"twonode: {plan.node_a} ({plan.devices_a}) {a.url}, {plan.node_b} "
                f"({plan.devices_b}) {b.url}, prometheus {url}; warming up {warm:g}s, "
                f"then measuring {plan.seconds:g}s")
            time.sleep(warm + plan.seconds)
            out = results(url, plan)
    (plan.out / "twonode.json").write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testkit.twonode",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--devices-a", required=True, help="GPUs of the first daemon (--devices)")
    p.add_argument("--devices-b", required=True, help="GPUs of the second daemon")
    p.add_argument("--seconds", type=float, default=120.0, help="how long to run (default 120)")
    p.add_argument("--out", type=Path, required=True, help="directory for the results")
    p.add_argument("--node-a", default="half-a")
    p.add_argument("--node-b", default="half-b")
    p.add_argument("--simulate", action="store_true", help="the simulated node, no GPU")
    p.add_argument("--simulate-gpus", type=int, default=12)
    p.add_argument("--interval", type=float, default=1.0,
                   help="daemon poll, scrape and rule interval in seconds (default 1)")
    p.add_argument("--window", default="30s", help="every rule window (default 30s)")
    p.add_argument("--for-cap", type=int, default=10, help="cap on every for: (seconds)")
    p.add_argument("--prometheus", default="prometheus", help="Prometheus binary")
    args = p.parse_args(argv)
    if shutil.which(args.prometheus) is None and not Path(args.prometheus).is_file():
        p.exit(2, f"{p.prog}: --prometheus: {args.prometheus} not found\n")
    plan = Plan(**{k: v for k, v in vars(args).items()})
    out = run(plan)
    print(json.dumps({k: out[k] for k in ("straggler", "jobs")}, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
