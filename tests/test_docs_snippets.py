"""Docs that run: every fenced block of README.md and docs/*.md is executed or marked.

- YAML: an exporter configuration loads with the daemon's config loader; a Prometheus
  configuration passes ``promtool check config`` and scrapes the exporter under the job the
  mixin selects (mixin/config.yaml); Helm values render with the chart and its schema.
- PromQL (one query per line, indented lines continue it) parses and names only metric
  families and recording rules that exist.
- Shell: commands that start the product (``make run``, ``python -m exporter --simulate``)
  start it on a free loopback port and are scraped once; ``curl`` to it, ``helm install``
  of the local chart (rendered with its ``--set``/``-f`` values), ``python -m mixin`` and
  exporter configs written by here-documents run too. Anything else (registries, clusters,
  root) needs a marker on the line before the fence, ``<!-- snippet: partly-run: why -->``
  (run what can run, skip the rest) or ``<!-- snippet: not-run: why -->``.

Each failure starts with ``FILE:LINE`` of the block and says what to change.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml

from exporter.sim.patterns import NODE
from exporter.wiring.config import ConfigError, build
from tests.support import docsnippets as ds
from tests.support.prometheus import free_port
from tests.test_docs_names import known_names

REPO = ds.REPO
SNIPPETS = ds.all_snippets()
PY = sys.executable
CHART = "./helm/gpu-goodput-exporter"


def _job_selected_by_mixin() -> str:
    selector = yaml.safe_load((REPO / "mixin/config.yaml").read_text())["selector"]
    m = re.search(r'job="([^"]+)"', selector)
    assert m, f"mixin/config.yaml selector {selector!r} names no job"
    return m[1]


def _hint(s: ds.Snippet) -> str:
    return (f"\n  (if this block is not meant to be run, put `<!-- snippet: not-run: why -->` "
            f"on the line before the fence at {s.where})")


# ---------------------------------------------------------------- every block: tag, marker

@pytest.mark.parametrize("snippet", SNIPPETS, ids=str)
def test_fence_names_its_language_and_marker_is_known(snippet: ds.Snippet) -> None:
    known = ds.SHELL | ds.YAML | ds.PROMQL | ds.OTHER
    assert snippet.lang in known, (
        f"{snippet.where}: tag the fence with its language: ```sh, ```yaml or ```promql "
        f"(these are checked), or ```text for anything else (got {snippet.lang or 'none'!r})")
    if snippet.marker:
        assert snippet.marker in ds.MARKERS, (
            f"{snippet.where}: unknown marker {snippet.marker!r}; one of {sorted(ds.MARKERS)}")
        assert snippet.why or snippet.marker not in ds.NEEDS_WHY, (
            f"{snippet.where}: say why after the colon: <!-- snippet: {snippet.marker}: why -->")


# ------------------------------------------------------------------------------- YAML

YAML_SNIPPETS = [s for s in SNIPPETS if s.lang in ds.YAML and s.marker != "not-run"]


def _yaml_kind(s: ds.Snippet, data: Any) -> str:
    if s.marker and s.marker != "partly-run":
        return s.marker
    if isinstance(data, dict) and "scrape_configs" in data:
        return "prometheus-config"
    return "exporter-config"


def check_exporter_config(where: str, text: str) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(text)
        f.flush()
        try:
            build({}, environ={}, config_file=f.name)
        except ConfigError as exc:
            raise AssertionError(f"{where}: the exporter refuses this config: {exc}") from None


def check_prometheus_config(s: ds.Snippet, data: dict[str, Any], tmp: Path) -> None:
    path = tmp / "prometheus.yml"
    path.write_text(s.text)
    if any(str(f).startswith("alerts/") for f in data.get("rule_files") or []):
        shutil.copytree(REPO / "alerts", tmp / "alerts")  # "copied next to prometheus.yml"
    done = subprocess.run(["promtool", "check", "config", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (
        f"{s.where}: promtool check config fails:\n{done.stdout}{done.stderr}")
    job = _job_selected_by_mixin()
    for scrape in data.get("scrape_configs") or []:
        targets = json.dumps(scrape.get("static_configs", []))
        if ":9433" in targets or "goodput" in scrape.get("job_name", ""):
            assert scrape["job_name"] == job, (
                f"{s.where}: scrape job {scrape['job_name']!r} scrapes the exporter, but every "
                f"recording rule, alert and dashboard selects job=\"{job}\" (selector in "
                f"mixin/config.yaml): name the job {job!r}")
            # Panels rate raw counters over Grafana's $__rate_interval (1 m for a data source
            # at its 15 s default): scraped at Prometheus's default of 1 m they stay empty.
            interval = scrape.get("scrape_interval") or (data.get("global") or {}).get(
                "scrape_interval", "1m")
            assert _seconds(str(interval)) <= 15, (
                f"{s.where}: the exporter is scraped every {interval}; the dashboards need "
                f"15 s or less (set scrape_interval: 15s)")
            assert scrape.get("honor_labels") is True, (
                f"{s.where}: scrape the exporter with honor_labels: true (its pod labels "
                f"must win over the target's)")


def _seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    return sum(float(n) * units[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", duration))


def check_helm_values(where: str, values: dict[str, Any]) -> None:
    from tests.support.helm import render

    try:
        render(values)
    except Exception as exc:  # helm_python raises its own error types
        raise AssertionError(f"{where}: the chart refuses these values: {exc}") from None


def check_pod_fragment(where: str, data: Any) -> None:
    annotations = (data.get("metadata") or {}).get("annotations") or {}
    code = (REPO / "exporter/sources/serving/discovery.py").read_text()
    for key in annotations:
        if "goodput.dev/" in key:
            name = key.split("/", 1)[1]
            assert f'"{name}"' in code or f"'{name}'" in code or key in code, (
                f"{where}: annotation {key} is not read by exporter/sources/serving/discovery.py")


@pytest.mark.parametrize("snippet", YAML_SNIPPETS, ids=str)
def test_yaml_block(snippet: ds.Snippet, tmp_path: Path) -> None:
    try:
        data = yaml.safe_load(snippet.text)
    except yaml.YAMLError as exc:
        pytest.fail(f"{snippet.where}: not valid YAML: {exc}")
    kind = _yaml_kind(snippet, data)
    if kind == "exporter-config":
        try:
            check_exporter_config(snippet.where, snippet.text)
        except AssertionError as exc:
            pytest.fail(f"{exc}\n  (not an exporter config? mark it, e.g. "
                        f"`<!-- snippet: helm-values -->`; kinds: {sorted(ds.MARKERS)})")
    elif kind == "prometheus-config":
        check_prometheus_config(snippet, data, tmp_path)
    elif kind == "helm-values":
        check_helm_values(snippet.where, data)
    elif kind == "pod-fragment":
        check_pod_fragment(snippet.where, data)
    else:
        pytest.fail(f"{snippet.where}: marker {kind!r} does not apply to YAML")


# ------------------------------------------------------------------------------ PromQL

NAME = re.compile(r"\bgoodput(?:_[a-z0-9_]+|:[a-z0-9_:]+)\b")


def queries(text: str) -> list[str]:
    """One query per line; an indented line, or one that starts with a closing bracket,
    continues the query above it."""
    out: list[str] = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if (line[0].isspace() or line[0] in ")]}") and out:
            out[-1] += " " + line.strip()
        else:
            out.append(line.strip())
    return out


def check_promql(where: str, text: str) -> None:
    for expr in queries(text):
        try:
            promql_parser.parse(expr)
        except Exception as exc:  # promql_parser raises ValueError subclasses
            raise AssertionError(
                f"{where}: PromQL does not parse: {exc}\n  {expr}\n  (one query per line; "
                "indent the lines that continue a query)") from None
        unknown = sorted(set(NAME.findall(expr)) - known_names())
        assert not unknown, f"{where}: names no metric family or recording rule: {unknown}"


@pytest.mark.parametrize(
    "snippet", [s for s in SNIPPETS if s.lang in ds.PROMQL and s.marker != "not-run"], ids=str)
def test_promql_block(snippet: ds.Snippet) -> None:
    check_promql(snippet.where, snippet.text)


def test_promql_check_catches_a_wrong_name() -> None:
    with pytest.raises(AssertionError, match="goodput_gpu_serving_tokens_total"):
        check_promql("x.md:1", "rate(goodput_gpu_serving_tokens_total[5m])")
    with pytest.raises(AssertionError, match="does not parse"):
        check_promql("x.md:1", "rate(goodput_gpu_tokens_total[5m]")
    check_promql("x.md:1", "sum by (gpu) (\n  rate(goodput_gpu_tokens_total[5m])\n)\nup")


# ------------------------------------------------------------------------------- shell

# Commands other tests run, or that are this test suite.
COVERED = {
    ("make", "test"): "make test runs this suite",
    ("make", "stack"): "test_stack_test_runs_as_docs_dashboards_writes_it runs scripts/stack.py "
                       "--test as written",
}
# Why a command cannot run in a test (first word -> reason).
OUTSIDE = {
    "docker": "needs a container engine and a registry",
    "podman": "needs a container engine and a registry",
    "buildah": "needs a container engine and a registry",
    "kubectl": "needs a cluster",
    "systemctl": "needs root and systemd",
    "install": "writes to system directories",
    "pip": "installs into an environment",
    "python3": "creates environments or runs benchmarks by hand",
    "sudo": "needs root",
    "apt-get": "needs root and network",
    "htpasswd": "an example for the reader",
}


class Block:
    """Runs one shell block: background helpers and the product, then the rest, in order."""

    def __init__(self, snippet: ds.Snippet, tmp: Path, stack: ExitStack) -> None:
        self.s, self.tmp, self.stack = snippet, tmp, stack
        self.ports: dict[str, int] = {}
        self.product: int | None = None  # port the started product serves on
        self.skipped: list[str] = []
        self.env = {**os.environ, "PATH": f"{Path(PY).parent}:{os.environ['PATH']}",
                    "PYTHONPATH": str(REPO)}
        self.vars: dict[str, str] = {"REGISTRY": "registry.example.com"}

    def port(self, documented: str) -> int:
        if documented not in self.ports:
            self.ports[documented] = free_port()
        return self.ports[documented]

    def local(self, text: str) -> str:
        """Documented ports -> free loopback ones (never every interface); /tmp -> this
        test's directory."""
        text = re.sub(r"(127\.0\.0\.1|localhost|0\.0\.0\.0):(\d{1,5})\b",
                      lambda m: f"127.0.0.1:{self.port(m[2])}", text)
        text = re.sub(r"(--listen[ =]):(\d{1,5})\b", lambda m: f"{m[1]}127.0.0.1:{self.port(m[2])}",
                      text)
        return text.replace("/tmp/", f"{self.tmp}/")

    def fail(self, cmd: ds.Command, why: str) -> None:
        pytest.fail(f"{self.s.where} (line {cmd.line}): `{cmd.text}`: {why}")

    def spawn(self, argv: list[str]) -> subprocess.Popen[bytes]:
        log = (self.tmp / f"proc-{len(self.skipped)}-{time.monotonic_ns()}.log").open("wb")
        proc = subprocess.Popen(argv, cwd=REPO, env=self.env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)

        def stop() -> None:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            log.close()

        self.stack.callback(stop)
        proc.log = Path(log.name)  # type: ignore[attr-defined]
        return proc

    def wait_product(self, cmd: ds.Command, proc: subprocess.Popen[bytes], port: int) -> None:
        deadline = time.monotonic() + 90
        url = f"http://127.0.0.1:{port}/metrics"
        while True:
            if proc.poll() is not None:
                tail = proc.log.read_text()[-1500:]  # type: ignore[attr-defined]
                self.fail(cmd, f"exited with {proc.returncode} before serving:\n{tail}")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    body = resp.read().decode()
                if "goodput_gpu_up{" in body:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.fail(cmd, f"{url} served no goodput_gpu_up within 90 s")
            time.sleep(0.3)
        self.product = port
        gpus = set(re.findall(r'^goodput_gpu_up\{[^}]*gpu="(\d+)"', body, re.M))
        if "--simulate-gpus" not in cmd.text and len(gpus) != len(NODE):
            self.fail(cmd, f"the simulated node serves {len(gpus)} GPUs, the docs and "
                           f"exporter/sim/patterns.py say {len(NODE)}")
        for doc_url in re.findall(r"https?://(?:127\.0\.0\.1|localhost):\d+\S*", cmd.comment):
            local = self.local(doc_url).rstrip(".,)")
            with urllib.request.urlopen(local, timeout=5) as resp:
                assert resp.status == 200, f"{self.s.where}: {doc_url} answers {resp.status}"

    # --- runners

    def start_product(self, cmd: ds.Command, argv: list[str], listen: str | None) -> None:
        port = int(listen.rsplit(":", 1)[1]) if listen else self.port("9433")
        self.wait_product(cmd, self.spawn(argv), port)

    def exporter(self, cmd: ds.Command, args: list[str]) -> None:
        """``args``: ``-m exporter ...``; only the simulated node runs without a GPU."""
        args = self.local(" ".join(args)).replace("--listen=", "--listen ").split()
        if "--simulate" not in args:
            self.skip(cmd, "needs a GPU and its driver")
            return
        if "--listen" in args:
            listen = args[args.index("--listen") + 1]
        else:  # the default binds every interface: the tests stay on loopback
            listen = f"127.0.0.1:{self.port('9433')}"
            args += ["--listen", listen]
        self.start_product(cmd, [PY, *args], listen)

    def top(self, cmd: ds.Command, args: list[str]) -> None:
        """``gpu-goodput-exporter top ...``: one frame (``--once``) of the documented view,
        reading the block's product (its documented URL made local) or a simulated node."""
        args = self.local(" ".join(args)).split()
        done = subprocess.run([PY, "-m", "exporter", "top", *args, "--once", "--width", "80"],
                              env=self.env, cwd=REPO, capture_output=True, text=True,
                              timeout=60, check=False)
        if done.returncode != 0 or " GPU REGIME" not in done.stdout:
            self.fail(cmd, f"exit {done.returncode}: {done.stdout[-800:]}{done.stderr[-800:]}")

    def helper(self, cmd: ds.Command, args: list[str]) -> None:
        """A background `python -m tests.x` / `testkit.x` / `exporter.x`: start, wait for files."""
        args = self.local(" ".join(args)).split()
        self.spawn([PY, *args])
        paths = [Path(a) for a in args if a.startswith(str(self.tmp))]
        deadline = time.monotonic() + 30
        while paths and not all(p.exists() for p in paths) and time.monotonic() < deadline:
            time.sleep(0.2)

    def make(self, cmd: ds.Command) -> None:
        target = cmd.words[1] if len(cmd.words) > 1 else ""
        if (cmd.program, target) in COVERED:
            return
        if target == "run":
            port = self.port("9433")
            self.start_product(cmd, ["make", "--no-print-directory", "-o", "bootstrap-runtime",
                                     "run", f"LISTEN=127.0.0.1:{port}", f"PY={PY}",
                                     *cmd.words[2:]], f"127.0.0.1:{port}")
        elif target == "mixin":
            self.run(cmd, ["make", "-o", "bootstrap", "mixin", f"MIXIN_OUT={self.tmp}/mixin",
                           f"PY={PY}"])
        else:
            self.skip(cmd, "a build or packaging target (CI and tests/test_release.py)")

    def mixin(self, cmd: ds.Command, args: list[str]) -> None:
        if "--config" in args:
            config = REPO / args[args.index("--config") + 1]
            if not config.exists():
                self.skip(cmd, f"needs your override file {config.name}")
                return
        if "--check" not in args and "--out" not in args:
            args += ["--out", f"{self.tmp}/mixin"]
        self.run(cmd, [PY, *args])

    def run(self, cmd: ds.Command, argv: list[str]) -> None:
        done = subprocess.run(argv, cwd=REPO, env=self.env, capture_output=True, text=True,
                              timeout=300)
        if done.returncode != 0:
            self.fail(cmd, f"exit {done.returncode}:\n{(done.stdout + done.stderr)[-1500:]}")

    def curl(self, cmd: ds.Command) -> None:
        text = self.local(cmd.text.split(" #", 1)[0])
        if "127.0.0.1" not in text:
            self.skip(cmd, "reaches another host")
            return
        if self.product is None:
            self.skip(cmd, "scrapes an exporter this block does not start here")
            return
        deadline = time.monotonic() + 30
        while True:
            done = subprocess.run(["bash", "-o", "pipefail", "-c", text], cwd=REPO,
                                  env=self.env, capture_output=True, text=True, timeout=30)
            if done.returncode == 0 and done.stdout.strip():
                return
            if time.monotonic() > deadline:
                self.fail(cmd, f"exit {done.returncode}, output {done.stdout[-300:]!r} "
                               f"{done.stderr[-300:]!r}")
            time.sleep(0.5)

    def helm(self, cmd: ds.Command) -> None:
        words = [re.sub(r"\$\{?(\w+)\}?", lambda m: self.vars.get(m[1], m[0]), w)
                 for w in cmd.words]
        if len(words) < 2 or words[1] not in ("install", "template", "upgrade"):
            self.skip(cmd, "needs a cluster")
            return
        values: dict[str, Any] = {}
        positional: list[str] = []
        i = 2
        while i < len(words):
            word = words[i]
            if word in ("--set", "--set-string"):
                for pair in words[i + 1].split(","):
                    key, _, raw = pair.partition("=")
                    value: Any = raw
                    if word == "--set":
                        value = {"true": True, "false": False}.get(raw, raw)
                        value = int(raw) if raw.isdigit() else value
                    node = values
                    *parents, leaf = key.split(".")
                    for part in parents:
                        node = node.setdefault(part, {})
                    node[leaf] = value
                i += 2
            elif word in ("-f", "--values"):
                values = _deep_merge(values, self.values_file(cmd, words[i + 1]))
                i += 2
            elif word in ("-n", "--namespace", "--version"):
                i += 2
            elif word.startswith("-"):
                i += 1
            else:
                positional.append(word)
                i += 1
        if CHART not in positional and CHART.lstrip("./") not in positional:
            self.skip(cmd, "installs a chart from elsewhere")
            return
        check_helm_values(f"{self.s.where} (line {cmd.line})", values)

    def values_file(self, cmd: ds.Command, name: str) -> dict[str, Any]:
        """A values file the same document shows as a YAML block starting `# <name>`."""
        for other in ds.snippets(REPO / self.s.path):
            if other.lang in ds.YAML and other.text.lstrip().startswith(f"# {name}"):
                data: dict[str, Any] = yaml.safe_load(other.text) or {}
                return data
        self.fail(cmd, f"no YAML block in {self.s.path} starts with `# {name}`, so the test "
                       "cannot tell what the values file holds")
        return {}

    def cat(self, cmd: ds.Command) -> None:
        target = next((w for w in cmd.words if w.endswith((".yaml", ".yml"))), "")
        if cmd.heredoc and "gpu-goodput-exporter" in target and "web-config" not in target:
            check_exporter_config(f"{self.s.where} (line {cmd.line})", cmd.heredoc)
        else:
            self.skip(cmd, "writes a file outside the checkout")

    def skip(self, cmd: ds.Command, why: str) -> None:
        self.skipped.append(f"line {cmd.line} `{cmd.text}`: {why}")

    def command(self, cmd: ds.Command) -> None:
        words = cmd.words
        if not words:  # a variable assignment
            self.vars.update(cmd.env)
            return
        prog = cmd.program
        if prog == "make":
            self.make(cmd)
        elif prog in ("python", "python3") and words[1:3] == ["-m", "exporter"]:
            self.exporter(cmd, words[1:])
        elif prog == "gpu-goodput-exporter" and words[1:2] == ["top"]:
            self.top(cmd, words[2:])
        elif prog == "gpu-goodput-exporter":
            self.exporter(cmd, ["-m", "exporter", *words[1:]])
        elif prog in ("python", "python3") and words[1:3] == ["-m", "mixin"]:
            self.mixin(cmd, words[1:])
        elif prog in ("python", "python3") and cmd.background and len(words) > 2 \
                and words[1] == "-m" and words[2].startswith(("tests.", "testkit.", "exporter.")):
            self.helper(cmd, words[1:])
        elif prog in ("python", "python3") and any(
            w.startswith(("bench/", "bench.")) for w in words
        ):
            self.skip(cmd, "a benchmark, run by hand (docs/benchmarks.md)")
        elif prog == "curl":
            self.curl(cmd)
        elif prog == "helm":
            self.helm(cmd)
        elif prog == "cat":
            self.cat(cmd)
        else:
            self.skip(cmd, OUTSIDE.get(prog, f"the test has no runner for `{prog}`"))


def _deep_merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for key, value in b.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


SHELL_SNIPPETS = [s for s in SNIPPETS
                  if s.lang in ds.SHELL and s.marker not in ("not-run", "as-written")]


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as st:
        yield st


@pytest.mark.parametrize("snippet", SHELL_SNIPPETS, ids=str)
def test_shell_block(snippet: ds.Snippet, tmp_path: Path, stack: ExitStack) -> None:
    try:
        cmds = ds.commands(snippet)
    except ValueError as exc:
        pytest.fail(f"{snippet.where}: {exc}")
    block = Block(snippet, tmp_path, stack)
    for cmd in cmds:
        block.command(cmd)
    if block.skipped and snippet.marker != "partly-run":
        pytest.fail(
            f"{snippet.where}: the test cannot run these lines:\n  "
            + "\n  ".join(block.skipped)
            + "\n  Mark the block on the line before its fence: "
            "`<!-- snippet: partly-run: why -->` (runs the rest) or "
            "`<!-- snippet: not-run: why -->`, or add a runner in tests/test_docs_snippets.py.")
    if snippet.marker == "partly-run":
        assert len(block.skipped) < len(cmds), (
            f"{snippet.where}: nothing in this block runs: mark it `not-run` instead")


def test_every_doc_has_been_read() -> None:
    """The parser sees the blocks (a broken fence regex would make every test vacuous)."""
    files = {s.path for s in SNIPPETS}
    assert {"README.md", "docs/install.md", "docs/dashboards.md"} <= files
    assert len(SHELL_SNIPPETS) >= 5 and len(YAML_SNIPPETS) >= 5


def test_checks_catch_wrong_snippets(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match=r"x.md:1: .*unknown config key 'intervall'"):
        check_exporter_config("x.md:1", "intervall: 1\n")
    bad = ds.Snippet("x.md", 1, "yaml", "scrape_configs:\n  - job_name: gpu-goodput\n"
                     "    static_configs: [{targets: ['n:9433']}]\n")
    with pytest.raises(AssertionError, match="name the job 'gpu-goodput-exporter'"):
        check_prometheus_config(bad, yaml.safe_load(bad.text), tmp_path)
    slow = ds.Snippet("x.md", 1, "yaml", "scrape_configs:\n  - job_name: gpu-goodput-exporter\n"
                      "    honor_labels: true\n    static_configs: [{targets: ['n:9433']}]\n")
    with pytest.raises(AssertionError, match="scraped every 1m"):
        check_prometheus_config(slow, yaml.safe_load(slow.text), tmp_path)
    pytest.importorskip("helm_python")
    with pytest.raises(AssertionError, match=r"x\.md:1: the chart refuses"):
        check_helm_values("x.md:1", {"serviceMonitr": {"enabled": True}})


def test_commands_split_like_a_shell() -> None:
    text = ("X=1 python -m a --b \\\n  --c 'd e' &  # note\n"
            "cat > /etc/f.yaml <<'YAML'\nlisten: \":1\"\nYAML\n"
            "# only a comment\ncurl -s u | grep x")
    cmds = ds.commands(ds.Snippet("x.md", 10, "sh", text))
    assert [c.words for c in cmds] == [["python", "-m", "a", "--b", "--c", "d e"],
                                       ["cat", ">", "/etc/f.yaml"],
                                       ["curl", "-s", "u", "|", "grep", "x"]]
    assert cmds[0].env == {"X": "1"} and cmds[0].background and cmds[0].comment == "note"
    assert cmds[1].heredoc == 'listen: ":1"\n' and cmds[1].line == 13


def test_every_marker_sits_on_a_fence() -> None:
    """A marker separated from its block (an edit slipped text in between) marks nothing."""
    stray = []
    for path in ds.doc_files():
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if ds.MARKER.match(line):
                nxt = next((x for x in lines[i + 1:] if x.strip()), "")
                if not ds.FENCE.match(nxt):
                    stray.append(f"{path.relative_to(REPO)}:{i + 1}")
    assert not stray, "snippet markers not followed by a fence:\n" + "\n".join(stray)


CHECKOUT_MODULES = ("exporter", "mixin", "tests", "testkit", "bench")
"""What ``python -m`` runs from the checkout: it needs the quick start's ``.venv``."""
ELSEWHERE = (
    ("README.md", "gpu-goodput-exporter  "),  # after `pip install .`: the installed command
    ("docs/benchmarks.md", "bench.gpu.gpu_validation"),  # on the GPU machine, its own Python
    ("docs/benchmarks.md", "bench.gpu.workloads"),
    ("docs/architecture.md", "bench.gpu.workloads"),
    ("docs/install.md", "exporter.web.healthcheck"),  # inside the image
)
"""Commands the docs run somewhere other than the checkout, each saying where."""
INLINE = re.compile(r"`(?:PYTHONPATH=\S+ )?(python3?|gpu-goodput-exporter) (-m (\w+)\S*|top)[^`]*`")


def _elsewhere(path: str, text: str) -> bool:
    return any(path == p and needle in text for p, needle in ELSEWHERE)


def test_every_command_runs_through_the_quick_starts_venv() -> None:
    """A fresh clone has no activated venv: there `python -m exporter` fails (no structlog)
    and `gpu-goodput-exporter` is not on PATH. So every command of README.md and docs/*.md
    that runs the checkout's code goes through `.venv/bin/`, fenced or inline, or is one of
    ELSEWHERE."""
    wrong = []
    for snippet in (s for s in SNIPPETS if s.lang in ds.SHELL):
        for cmd in ds.commands(snippet):
            words = cmd.words
            module = words[2].split(".")[0] if words[1:2] == ["-m"] and len(words) > 2 else ""
            ours = (cmd.program in ("python", "python3") and module in CHECKOUT_MODULES) or (
                cmd.program == "gpu-goodput-exporter")
            if ours and not words[0].startswith(".venv/bin/") and not _elsewhere(
                    snippet.path, cmd.text + "  "):
                wrong.append(f"{snippet.path}:{cmd.line}: {cmd.text}")
    for path in ds.doc_files(REPO):
        rel = str(path.relative_to(REPO))
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for m in INLINE.finditer(line):
                checkout = m[1] == "gpu-goodput-exporter" or m[3] in CHECKOUT_MODULES
                if checkout and not _elsewhere(rel, m[0]) and "top  node" not in line:
                    wrong.append(f"{rel}:{number}: {m[0]}")
    assert not wrong, ("run these through the quick start's venv (`.venv/bin/python -m ...`, "
                       "`.venv/bin/gpu-goodput-exporter`), or say where they run "
                       "(ELSEWHERE):\n  " + "\n  ".join(wrong))


# ------------------------------------------------------- as pasted, in a fresh clone, no venv

AS_WRITTEN = {
    "docs/jobs.md": "Find your job's straggler",
    "docs/dashboards.md": "The local stack",
}
"""Sections whose shell commands a test below pastes whole into bash, in a fresh copy of the
checkout with no virtualenv activated (tests/support/fresh_clone.py), and checks the output
of: the commands that must wait for something (the daemon's readiness, a first verdict)."""


def _section_start(path: str, heading: str) -> int:
    """1-based line of the ``## heading`` (any level) in ``path``."""
    lines = (REPO / path).read_text().splitlines()
    found = [i + 1 for i, line in enumerate(lines)
             if line.startswith("#") and line.lstrip("#").strip() == heading]
    assert found, f"{path}: no section {heading!r} (AS_WRITTEN in tests/test_docs_snippets.py)"
    return found[0]


def _section_end(path: str, start: int) -> int:
    lines = (REPO / path).read_text().splitlines()
    level = len(lines[start - 1]) - len(lines[start - 1].lstrip("#"))
    return next((i + 1 for i in range(start, len(lines))
                 if lines[i].startswith("#") and
                 len(lines[i]) - len(lines[i].lstrip("#")) <= level), len(lines) + 1)


def straggler_recipe() -> ds.Snippet:
    """The first shell block under docs/jobs.md's "Find your job's straggler"."""
    path = "docs/jobs.md"
    start = _section_start(path, AS_WRITTEN[path])
    return next(s for s in ds.snippets(REPO / path) if s.line > start and s.lang in ds.SHELL)


def stack_test_command() -> tuple[str, str]:
    """(where, command): how docs/dashboards.md's "The local stack" says to run the stack's
    test, from its shell blocks, else from its inline code."""
    path = "docs/dashboards.md"
    start = _section_start(path, AS_WRITTEN[path])
    end = _section_end(path, start)
    for snippet in ds.snippets(REPO / path):
        if start < snippet.line < end and snippet.lang in ds.SHELL:
            for cmd in ds.commands(snippet):
                if "stack.py" in cmd.text and "--test" in cmd.words:
                    return f"{path}:{cmd.line}", cmd.text
    lines = (REPO / path).read_text().splitlines()
    for number in range(start, end - 1):
        for code in re.findall(r"`([^`]*stack\.py --test[^`]*)`", lines[number]):
            return f"{path}:{number + 1}", code
    raise AssertionError(f"{path}: the section {AS_WRITTEN[path]!r} does not say how to run "
                         "scripts/stack.py --test")


def test_every_as_written_block_is_one_a_test_runs() -> None:
    for s in (s for s in SNIPPETS if s.marker == "as-written"):
        assert s.path in AS_WRITTEN and s.lang in ds.SHELL, (
            f"{s.where}: marked as-written, but no test pastes it: add its section to "
            "AS_WRITTEN and a test that checks what it prints")
        start = _section_start(s.path, AS_WRITTEN[s.path])
        assert start < s.line < _section_end(s.path, start), (
            f"{s.where}: marked as-written outside the section {AS_WRITTEN[s.path]!r}")


@pytest.mark.integration
def test_the_straggler_recipe_runs_as_pasted(tmp_path: Path) -> None:
    """docs/jobs.md's recipe, pasted into bash in a fresh clone with no venv activated:
    `make run &`, then what waits for the daemon, then `top` naming GPU 9 the straggler of
    job 4242 (right after start: it waits for the first verdict), then one line that names
    the GPU. The documented port becomes a free one (LISTEN is the Makefile's knob)."""
    from tests.support.fresh_clone import fresh_clone, plain_env, run_as_written

    recipe = straggler_recipe()
    port = free_port()
    clone = fresh_clone(tmp_path / "clone")
    ran = run_as_written(recipe.text.replace(":9433", f":{port}"), clone,
                         plain_env(clone, LISTEN=f"127.0.0.1:{port}"), timeout=300)
    assert ran.returncode == 0, f"{recipe.where}: the recipe fails as pasted, {ran}"
    assert re.search(r"^[ >] *9\* ", ran.output, re.M), (
        f"{recipe.where}: top does not mark GPU 9 as the straggler (`9*`):\n{ran.output}")
    lines = [x for x in ran.output.splitlines() if "4242" in x and "9" in x
             and not x.lstrip().startswith(("job ", "9*"))]
    assert any(re.search(r'gpu="?9\b', x) for x in lines), (
        f"{recipe.where}: no line names GPU 9 as job 4242's straggler:\n{ran.output}")


@pytest.mark.integration
def test_stack_test_runs_as_docs_dashboards_writes_it(tmp_path: Path) -> None:
    """`scripts/stack.py --test` as docs/dashboards.md writes it, pasted into bash in a
    fresh clone with no venv activated: both alerts reach the webhook (the checks of
    tests/test_stack.py), and the summary gives each alert's real time."""
    from tests.support.fresh_clone import fresh_clone, plain_env, run_as_written
    from tests.test_stack import check_delivered

    where, command = stack_test_command()
    clone = fresh_clone(tmp_path / "clone")
    ran = run_as_written(command, clone, plain_env(clone), timeout=300)
    assert ran.returncode == 0, f"{where}: `{command}` fails as pasted, {ran}"
    check_delivered(clone / ".stack", ran.output)
