"""A simulated fleet served live (bench/fleet/generator.py, one /metrics per node on
loopback) and scraped for real by Prometheus and by vmagent into VictoriaMetrics, each engine
recording the mixin's rules and evaluating its alerts live: tests/test_victoriametrics_live.py
and tests/test_vm_sharded.py.

Rule files come from the mixin with a test override (rule interval, `for:` 0 s so an alert's
activeAt is the first evaluation its condition held), written under the test's directory.
"""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench.fleet import generator as fleet
from bench.fleet.stack import Prometheus, prometheus
from exporter.process.logging import configure
from mixin.config import load
from mixin.render import rule_files

JOB = fleet.JOB
Labels = frozenset[tuple[str, str]]
# Labels an engine adds of its own: vmalert's group, the scraping shard.
ENGINE_LABELS = ("alertgroup", "shard")


def for_zero(extra: dict[str, Any] | None = None, interval: str = "20s") -> dict[str, Any]:
    """A mixin override: every alert fires at its first true evaluation, every group every
    ``interval``."""
    cfg = load()
    alerts = {name: {"for": "0s"} for name in cfg.alerts}
    return {"rule_interval": interval, "alerts": alerts, **(extra or {})}


def write_rules(out: Path, override: dict[str, Any]) -> tuple[Path, Path]:
    """The shipped rule files generated with ``override``: (recording, alerts)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for rel, text in rule_files(load(override)).items():
        path = out / Path(rel).name
        path.write_text(text)
        paths.append(path)
    rules, alerts = sorted(paths, key=lambda p: "alerts" in p.name)
    return rules, alerts


def write_shard_rules(out: Path, override: dict[str, Any], shards: int,
                      label: str = "shard") -> tuple[list[Path], Path]:
    """``python -m mixin --shards`` with ``override``: (per-shard files, global file)."""
    from mixin.shards import shard_files

    out.mkdir(parents=True, exist_ok=True)
    written = {}
    for rel, text in shard_files(load(override), shards, label).items():
        path = out / Path(rel).name
        path.write_text(text)
        written[path.name] = path
    return ([written[f"shard-{i}.rules.yml"] for i in range(shards)],
            written["global.rules.yml"])


@dataclass
class Served:
    """The fleet's nodes on loopback: node -> its HTTP server."""

    plan: fleet.Fleet
    servers: dict[str, ThreadingHTTPServer]

    def target(self, node: str) -> str:
        return f"127.0.0.1:{self.servers[node].server_address[1]}"

    @property
    def targets(self) -> list[str]:
        return [self.target(n) for n in self.plan.nodes]

    def kill(self, node: str) -> None:
        """The node's exporter stops answering (its port closes): every scrape fails."""
        server = self.servers[node]
        server.shutdown()
        server.server_close()


@contextmanager
def served(plan: fleet.Fleet, traces: fleet.Traces | None = None) -> Iterator[Served]:
    configure(level="warning")  # the archetypes' regime changes are not news here
    replay = fleet.Replay(plan, traces or fleet.record_archetypes())
    servers = dict(zip(plan.nodes, fleet.serve(replay, plan.nodes, smooth=True), strict=True))
    try:
        yield Served(plan, servers)
    finally:
        for server in servers.values():
            server.shutdown()
            server.server_close()


def scrape_config(targets: list[str], interval: str) -> dict[str, Any]:
    """Prometheus scraping every target under the exporter's job."""
    return {"job_name": JOB, "scrape_interval": interval, "scrape_timeout": interval,
            "static_configs": [{"targets": targets}]}


@contextmanager
def live_prometheus(workdir: Path, targets: list[str], rule_paths: list[Path],
                    interval: str = "5s", evaluation: str = "20s") -> Iterator[Prometheus]:
    config = {"global": {"scrape_interval": interval, "evaluation_interval": evaluation},
              "rule_files": [str(p) for p in rule_paths],
              "scrape_configs": [scrape_config(targets, interval)]}
    with prometheus(workdir, config) as prom:
        yield prom


def labelset(labels: dict[str, str], drop: tuple[str, ...] = ENGINE_LABELS) -> Labels:
    return frozenset((k, v) for k, v in labels.items() if k not in drop)


def firing(alerts: list[dict[str, Any]]) -> dict[Labels, dict[str, Any]]:
    """Label set (engine labels dropped) -> the alert, for alerts that fire."""
    return {labelset(a["labels"]): a for a in alerts if a.get("state") == "firing"}


NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def text_shape(text: str) -> str:
    """An annotation with its numbers masked: the engines' rate() differ in the last digits
    at a window's edge, the words must not."""
    return NUMBER.sub("#", text)


def wait_for(check: Callable[[], bool], timeout: float, step: float = 2.0) -> float:
    """Seconds until ``check()`` holds; raises TimeoutError after ``timeout``."""
    began = time.monotonic()
    while not check():
        if time.monotonic() - began > timeout:
            raise TimeoutError(f"not within {timeout:.0f} s")
        time.sleep(step)
    return time.monotonic() - began


def activated(value: str) -> float:
    """An alert's activeAt (RFC 3339, nanoseconds or not) as a Unix time."""
    from datetime import datetime

    head, _, frac = value.rstrip("Z").partition(".")
    stamp = datetime.fromisoformat(head + "+00:00").timestamp()
    return stamp + (float("0." + re.sub(r"\D.*", "", frac)) if frac else 0.0)


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return bytes(resp.read())
