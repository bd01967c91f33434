"""Sharded and federated Prometheus over a simulated fleet (bench/fleet/generator.py), all
real servers.

Two (or more) shards each hold the nodes that `hashmod` relabelling of the target address
would give them, backfilled with raw history and with the goodput.shard.* recording rules
(`promtool tsdb create-blocks-from rules`, one dependency level per pass in the order
testkit/rules.py gives, as tests/support/backfill.py does). The shards then load the shard
rule groups and alerts live.
A global Prometheus scrapes every shard's /federate (recorded series plus the few raw info
series the global rules and the fleet dashboard join on) and evaluates the goodput.global.*
groups. Everything listens on loopback.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench.fleet import generator as fleet_mod
from testkit.harness import LoggedServer, free_port
from testkit.rules import levels

REPO = Path(__file__).resolve().parents[2]

RULES = REPO / "alerts" / "goodput.rules.yml"
ALERTS = REPO / "alerts" / "goodput_alerts.rules.yml"
SHARD_PREFIX = "goodput.shard."
GLOBAL_PREFIX = "goodput.global."
# What the global Prometheus federates: every recorded series, and the raw series the global
# rules and the fleet dashboard join on (about 3 per GPU).
FEDERATED_RAW = ("goodput_gpu_info", "goodput_gpu_pod_info", "goodput_gpu_job_info",
                 "goodput_job_straggler", "goodput_gpu_regime",
                 "goodput_gpu_busy_unproductive", "goodput_exporter_build_info")
FEDERATE = ['{__name__=~"goodput:.+"}', f'{{__name__=~"{"|".join(FEDERATED_RAW)}"}}']


def log(message: str) -> None:
    """A benchmark's progress line on stderr, timestamped."""
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def report_options(parser: argparse.ArgumentParser, default: str) -> None:
    """--report (the JSON a run writes) and --render (print a saved one as markdown)."""
    parser.add_argument("--report", type=Path, default=Path(default), help="JSON report to write")
    parser.add_argument("--render", type=Path, help="print a report as markdown and exit")


def rendered(args: argparse.Namespace, render: Callable[[dict[str, Any]], str]) -> bool:
    """With --render, print that report through ``render`` and say so (the run is skipped)."""
    if args.render:
        print(render(json.loads(args.render.read_text())), end="")
    return bool(args.render)


def groups(path: Path, prefix: str) -> list[dict[str, Any]]:
    """The rule groups of ``path`` whose name starts with ``prefix``."""
    return [g for g in yaml.safe_load(path.read_text())["groups"]
            if g["name"].startswith(prefix)]


class Prometheus(LoggedServer):
    """A real Prometheus process on loopback."""

    def __init__(self, workdir: Path, config: dict[str, Any], rules: list[dict[str, Any]],
                 extra_args: tuple[str, ...] = ()) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        workdir.mkdir(parents=True, exist_ok=True)
        if rules:
            (workdir / "rules.yml").write_text(yaml.safe_dump({"groups": rules}))
            config = {**config, "rule_files": [str(workdir / "rules.yml")]}
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        binary = shutil.which("prometheus") or "prometheus"
        self._launch([binary, f"--config.file={workdir / 'prometheus.yml'}",
                      f"--storage.tsdb.path={workdir / 'data'}",
                      f"--web.listen-address=127.0.0.1:{self.port}",
                      "--storage.tsdb.retention.time=30d", *extra_args],
                     workdir / "prometheus.log", f"{self.url}/-/ready", 120)

    def api(self, path: str, **params: str) -> Any:
        q = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{q}", timeout=120) as resp:
            body = json.load(resp)
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return list(self.api("query", **params)["result"])

    def metric(self, text_filter: str) -> list[str]:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=30) as resp:
            return [line for line in resp.read().decode().splitlines()
                    if line.startswith(text_filter)]


def _durations(server: Prometheus) -> dict[str, tuple[int, float]]:
    """group -> (iterations so far, last evaluation's seconds)."""
    its = {line.split('rule_group="')[1].split('"')[0].split(";")[-1]: int(float(line.split()[-1]))
           for line in server.metric("prometheus_rule_group_iterations_total")}
    last = {line.split('rule_group="')[1].split('"')[0].split(";")[-1]: float(line.split()[-1])
            for line in server.metric("prometheus_rule_group_last_duration_seconds")}
    return {g: (its.get(g, 0), last[g]) for g in last}


def watch_groups(servers: dict[str, Prometheus], rounds: int, timeout: float,
                 log: Callable[[str], None] = log) -> dict[str, dict[str, Any]]:
    """Every evaluation's duration of every group on every server, until each group has run
    ``rounds`` times (or ``timeout``): "<server> <group>" -> evaluations, the first one's
    seconds (cold caches) and the later ones' median and maximum."""
    seen: dict[tuple[str, str], dict[int, float]] = {}
    deadline = time.monotonic() + timeout
    while True:
        for name, server in servers.items():
            for group, (iteration, seconds) in _durations(server).items():
                if iteration:
                    seen.setdefault((name, group), {})[iteration] = seconds
        done = all(len(v) >= rounds for v in seen.values()) and len(seen) > 0
        if done or time.monotonic() > deadline:
            break
        time.sleep(5)
    out: dict[str, dict[str, Any]] = {}
    for (name, group), runs in sorted(seen.items()):
        ordered = [runs[i] for i in sorted(runs)]
        out[f"{name} {group}"] = {
            "evaluations": len(ordered), "first_s": round(ordered[0], 3),
            "later_max_s": round(max(ordered[1:], default=ordered[0]), 3),
            "later_median_s": round(statistics.median(ordered[1:] or ordered), 3)}
        log(f"{name} {group}: {out[f'{name} {group}']}")
    return out


@contextmanager
def prometheus(workdir: Path, config: dict[str, Any] | None = None,
               rules: list[dict[str, Any]] | None = None,
               extra_args: tuple[str, ...] = ()) -> Iterator[Prometheus]:
    base = {"global": {"scrape_interval": "15s", "evaluation_interval": "1m"}}
    prom = Prometheus(workdir, {**base, **(config or {})}, rules or [], extra_args)
    try:
        yield prom
    finally:
        prom.stop()


def _run(*argv: str, timeout: float = 7200) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:4])} failed: {result.stdout}{result.stderr}")


def backfill_rules(workdir: Path, rule_groups: list[dict[str, Any]], start: float, end: float,
                   log: Callable[[str], None] = print, interval: str | None = None) -> None:
    """The recording rules of ``rule_groups`` over [start, end] into workdir/data, a
    dependency level per pass (promtool cannot see rules it backfills in the same run), at
    the groups' interval or ``interval`` (coarser for old hours)."""
    promtool = shutil.which("promtool") or "promtool"
    rules = [r for g in rule_groups for r in g["rules"] if "record" in r]
    interval = interval or (rule_groups[0].get("interval", "1m") if rule_groups else "1m")
    data = workdir / "data"
    for i, level in enumerate(levels(rules)):
        t = time.monotonic()
        rule_file = workdir / f"level{i}.rules.yml"
        rule_file.write_text(yaml.safe_dump(
            {"groups": [{"name": f"level{i}", "interval": interval, "rules": level}]}))
        blocks = workdir / f"level{i}-blocks"
        with _serving(data, workdir) as url:
            _run(promtool, "tsdb", "create-blocks-from", "rules", f"--start={int(start)}",
                 f"--end={int(end)}", f"--url={url}", f"--output-dir={blocks}", "-q",
                 str(rule_file))
        for block in blocks.iterdir():
            shutil.move(str(block), data / block.name)
        shutil.rmtree(blocks)
        log(f"rules level {i} ({len(level)} rules): {time.monotonic() - t:.1f} s")


@contextmanager
def _serving(data: Path, workdir: Path) -> Iterator[str]:
    """A Prometheus with no targets over ``data``, for promtool to query."""
    with prometheus(workdir, {"scrape_configs": []}) as prom:
        if prom.workdir / "data" != data:
            raise AssertionError("workdir/data is the TSDB")
        yield prom.url


@dataclass
class Stack:
    shards: list[Prometheus]
    global_: Prometheus
    owner: dict[str, int]  # node -> shard


def build_shard(workdir: Path, replay: fleet_mod.Replay, nodes: list[str], end: float,
                hours: float, fine_hours: float = 1.0,
                log: Callable[[str], None] = print) -> None:
    """Raw history and shard rules for ``nodes`` into workdir/data."""
    data = workdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    scratch = workdir / "scratch"
    scratch.mkdir(exist_ok=True)
    fleet_mod.backfill_raw(replay, nodes, data, scratch, end, hours, fine_hours, log=log)
    shutil.rmtree(scratch)
    rule_start = end - hours * 3600 + 600  # rate windows and offsets need history behind them
    backfill_rules(workdir, groups(RULES, SHARD_PREFIX), rule_start, end, log=log)


@contextmanager
def sharded(workdir: Path, replay: fleet_mod.Replay, end: float, hours: float = 0.6,
            shards: int = 2, interval: str = "15s",
            log: Callable[[str], None] = print) -> Iterator[Stack]:
    """``shards`` backfilled shard Prometheus servers and a global one federating them."""
    owner = {n: fleet_mod.shard_of(n, shards) for n in replay.fleet.nodes}
    for s in range(shards):
        build_shard(workdir / f"shard{s}", replay, [n for n in replay.fleet.nodes
                                                    if owner[n] == s], end, hours, log=log)
    shard_rules = groups(RULES, SHARD_PREFIX) + groups(ALERTS, SHARD_PREFIX)
    global_rules = groups(RULES, GLOBAL_PREFIX) + groups(ALERTS, GLOBAL_PREFIX)
    live = {"global": {"scrape_interval": interval, "evaluation_interval": interval}}
    with ExitStack() as stack:
        servers = [stack.enter_context(prometheus(workdir / f"shard{s}", {
            **live, "global": {**live["global"], "external_labels": {"shard": str(s)}},
            "scrape_configs": []}, shard_rules)) for s in range(shards)]
        federate = {**live, "scrape_configs": [{
            "job_name": "federate", "honor_labels": True, "metrics_path": "/federate",
            "params": {"match[]": FEDERATE},
            "static_configs": [{"targets": [s.url.removeprefix("http://") for s in servers]}],
        }]}
        global_ = stack.enter_context(prometheus(workdir / "global", federate, global_rules))
        yield Stack(servers, global_, owner)
