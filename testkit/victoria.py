"""Real VictoriaMetrics servers on loopback for tests: single-node victoria-metrics and vmalert,
the Debian package's binaries (`.ci/run` and `scripts/bootstrap.sh --tools` install it).

vmagent scrapes live targets into VictoriaMetrics, alone or as one member of a scraping
cluster. vmalert runs two ways: `replay` evaluates recording rules over history and writes
the results back (VictoriaMetrics' backfill, as `promtool tsdb create-blocks-from rules` is
Prometheus's); `VmAlert` is the live ruler, which alone runs annotation templates with
`query`.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from testkit.harness import LoggedServer, free_port, require

# Lines per import request: a few MB each.
IMPORT_BATCH = 20_000


def rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def openmetrics_to_import(lines: Iterable[str]) -> Iterator[str]:
    """OpenMetrics sample lines (timestamps in seconds) as the Prometheus text that
    /api/v1/import/prometheus takes (timestamps in milliseconds); comments dropped."""
    for line in lines:
        if not line or line.startswith("#"):
            continue
        head, stamp = line.rsplit(" ", 1)
        yield f"{head} {round(float(stamp) * 1000)}\n"


class VictoriaMetrics(LoggedServer):
    """A single-node victoria-metrics on loopback, its own data directory, no response cache
    (every test query sees what was just written)."""

    def __init__(self, workdir: Path, extra_args: tuple[str, ...] = ()) -> None:
        binary = require("victoria-metrics")
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._launch([binary, f"-storageDataPath={workdir / 'data'}",
                      f"-httpListenAddr=127.0.0.1:{self.port}", "-retentionPeriod=100y",
                      "-search.disableCache", "-loggerLevel=WARN", *extra_args],
                     workdir / "victoria-metrics.log", f"{self.url}/health", 60)

    def import_openmetrics(self, path: Path) -> int:
        """Every sample of an OpenMetrics file; returns how many."""
        total, batch = 0, []
        with path.open() as f:
            for line in openmetrics_to_import(f):
                batch.append(line)
                if len(batch) >= IMPORT_BATCH:
                    total += self._post(batch)
                    batch = []
        total += self._post(batch)
        return total

    def _post(self, lines: list[str]) -> int:
        if lines:
            req = urllib.request.Request(f"{self.url}/api/v1/import/prometheus",
                                         data="".join(lines).encode(), method="POST")
            with urllib.request.urlopen(req, timeout=120):
                pass
        return len(lines)

    def flush(self) -> None:
        """Make everything written so far searchable."""
        with urllib.request.urlopen(f"{self.url}/internal/force_flush", timeout=60):
            pass

    def query(self, expr: str, at: float, step: str = "5m") -> list[dict[str, Any]]:
        """An instant query as vmalert sends it (step = -datasource.queryStep, 5m)."""
        q = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}", "step": step})
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/query?{q}", timeout=120) as resp:
                body = json.load(resp)
        except urllib.error.HTTPError as exc:
            raise AssertionError(
                f"VictoriaMetrics rejected {expr!r}: {exc.read()[:500]!r}") from None
        if body.get("status") != "success":
            raise AssertionError(f"query {expr!r}: {body}")
        return list(body["data"]["result"])


@contextmanager
def victoria_metrics(workdir: Path) -> Iterator[VictoriaMetrics]:
    vm = VictoriaMetrics(workdir)
    try:
        yield vm
    finally:
        vm.stop()


def replay(vm: VictoriaMetrics, rule_file: Path, start: float, end: float, log: Path) -> None:
    """vmalert's replay mode: the rules of ``rule_file`` evaluated over [start, end] at each
    group's interval, the results written to ``vm``. Rules of one group run one after the
    other over the whole range; give a chained rule its own pass (testkit/rules.levels)."""
    binary = require("vmalert")
    with log.open("ab") as out:
        result = subprocess.run(
            [binary, f"-rule={rule_file}", f"-datasource.url={vm.url}",
             f"-remoteWrite.url={vm.url}", f"-replay.timeFrom={rfc3339(start)}",
             f"-replay.timeTo={rfc3339(end)}", "-replay.disableProgressBar",
             "-replay.rulesDelay=0s", "-loggerLevel=WARN",
             f"-httpListenAddr=127.0.0.1:{free_port()}"],
            stdout=out, stderr=subprocess.STDOUT, timeout=600, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"vmalert replay of {rule_file.name} failed: see {log}")
    vm.flush()


class VmAlert(LoggedServer):
    """vmalert evaluating ``rule_files`` live against ``vm``. Notifications go to a port
    nothing listens on: the test reads the alerts from vmalert's own API. With ``record``,
    recording rules' results are written back to ``vm`` (remote write), as a live
    deployment records them."""

    def __init__(self, workdir: Path, vm: VictoriaMetrics, rule_files: list[Path],
                 interval: str = "5s", record: bool = False,
                 extra_args: tuple[str, ...] = ()) -> None:
        binary = require("vmalert")
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        write = [f"-remoteWrite.url={vm.url}"] if record else []
        self._launch([binary, *(f"-rule={f}" for f in rule_files), f"-datasource.url={vm.url}",
                      f"-notifier.url=http://127.0.0.1:{free_port()}",
                      f"-evaluationInterval={interval}", *write, *extra_args,
                      f"-httpListenAddr=127.0.0.1:{self.port}", "-loggerLevel=ERROR"],
                     workdir / "vmalert.log", f"{self.url}/health", 60)

    def metric(self, prefix: str) -> list[str]:
        """Lines of vmalert's own /metrics starting with ``prefix``."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=30) as resp:
            return [line for line in resp.read().decode().splitlines()
                    if line.startswith(prefix)]

    def _get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=30) as resp:
            return json.load(resp)["data"]

    def alerts(self) -> list[dict[str, Any]]:
        """Pending and firing alerts (labels include vmalert's own `alertgroup`)."""
        return list(self._get("/api/v1/alerts")["alerts"] or [])

    def rules(self) -> list[dict[str, Any]]:
        return [r for g in self._get("/api/v1/rules")["groups"] for r in g["rules"]]

    def wait_evaluated(self, timeout: float = 60) -> None:
        """Until every rule has been evaluated at least once."""
        deadline = time.monotonic() + timeout
        while True:
            rules = self.rules()
            # Never evaluated: Go's zero time, 0001-01-01T00:00:00Z.
            if rules and all(not r.get("lastEvaluation", "0001").startswith("0001")
                             for r in rules):
                return
            if time.monotonic() > deadline:
                raise TimeoutError("vmalert has not evaluated every rule")
            time.sleep(0.5)


@contextmanager
def vmalert(workdir: Path, vm: VictoriaMetrics, rule_files: list[Path],
            interval: str = "5s", record: bool = False,
            extra_args: tuple[str, ...] = ()) -> Iterator[VmAlert]:
    ruler = VmAlert(workdir, vm, rule_files, interval, record, extra_args)
    try:
        yield ruler
    finally:
        ruler.stop()


class VmAgent(LoggedServer):
    """vmagent scraping ``targets`` (host:port, job ``job``) every ``interval`` into ``vm``.
    With ``members`` > 1 it is member ``member`` of a scraping cluster
    (-promscrape.cluster.membersCount/memberNum): it scrapes only the targets that hash to it,
    and labels everything it writes ``<shard_label>="<member>"`` so that each shard's vmalert
    selects its own series."""

    def __init__(self, workdir: Path, vm: VictoriaMetrics, targets: list[str], job: str,
                 interval: str = "5s", members: int = 1, member: int = 0,
                 shard_label: str = "shard") -> None:
        binary = require("vmagent")
        workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = workdir / "scrape.yml"
        config.write_text(json.dumps({
            "global": {"scrape_interval": interval, "scrape_timeout": interval},
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": targets}]}]}))
        cluster = ([f"-promscrape.cluster.membersCount={members}",
                    f"-promscrape.cluster.memberNum={member}",
                    f"-remoteWrite.label={shard_label}={member}"] if members > 1 else [])
        self._launch([binary, f"-promscrape.config={config}",
                      f"-remoteWrite.url={vm.url}/api/v1/write",
                      f"-remoteWrite.tmpDataPath={workdir / 'queue'}", *cluster,
                      f"-httpListenAddr=127.0.0.1:{self.port}", "-loggerLevel=ERROR"],
                     workdir / "vmagent.log", f"{self.url}/health", 60)

    def scraped(self) -> set[str]:
        """The targets this member scrapes (vmagent's own target list: in cluster mode only
        the ones that hash to it are active)."""
        with urllib.request.urlopen(f"{self.url}/api/v1/targets", timeout=30) as resp:
            body = json.load(resp)
        return {t["labels"]["instance"] for t in body["data"]["activeTargets"]}


@contextmanager
def vmagent(workdir: Path, vm: VictoriaMetrics, targets: list[str], job: str,
            interval: str = "5s", members: int = 1, member: int = 0,
            shard_label: str = "shard") -> Iterator[VmAgent]:
    agent = VmAgent(workdir, vm, targets, job, interval, members, member, shard_label)
    try:
        yield agent
    finally:
        agent.stop()
