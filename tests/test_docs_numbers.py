"""One truth per number: what README, docs, --help, Makefile and chart comments say about the
simulated node, ``make run``, scrape sizes and footprint agrees with where each number lives.

- the simulated node's size and workloads: ``exporter/sim/patterns.py`` NODE (the config
  default must equal it);
- ``make run``'s command: the Makefile (``make -n run``);
- the simulated node's scrape size: ``exporter.docgen.metrics`` (docs/metrics.md is generated
  from it), measured here against the real daemon;
- RSS figures quoted in the chart and install guide: ``docs/benchmarks.md``, where each was
  measured.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter import cli
from exporter.docgen import metrics as metrics_docs
from exporter.sim.patterns import LOST_AFTER_SECONDS, NODE
from exporter.wiring.config import Settings
from tests.conftest import REPO
from tests.support.daemon import DaemonProcess

WORDS = {w: i for i, w in enumerate([
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen"])}
N = r"(\d+|" + "|".join(WORDS) + r")"
# Ways the docs state the simulated node's size.
SIZE = [re.compile(p, re.I) for p in (
    rf"simulated {N}[- ]GPU\b",
    rf"\b{N} simulated (?:H100|GPU)s\b",
    rf"simulated node has {N} (?:H100|GPU)s\b",
    rf"simulated node[^.\n]{{0,40}}\((?:`--simulate`,\s*)?{N} GPUs\b",
    rf"--simulate-gpus N\s+number of simulated GPUs \(default {N}\)",
    rf"`--simulate-gpus N` \| {N} \|",  # README's settings table
)]
# Measurements of their day, with the node size they were taken on.
HISTORICAL = ("docs/benchmarks.md", "docs/validation/")


def _number(word: str) -> int:
    return int(word) if word.isdigit() else WORDS[word.lower()]


def _texts() -> Iterator[tuple[str, str]]:
    globs = ("README.md", "docs/**/*.md", "Makefile", "helm/**/*.yaml", "helm/**/*.txt",
             "helm/**/*.tpl", "scripts/*.py", "scripts/*.sh", "exporter/**/*.py", "deploy/**/*",
             "mixin/**/*.py", "Dockerfile")
    seen: set[Path] = set()
    for pattern in globs:
        for path in sorted(REPO.glob(pattern)):
            rel = str(path.relative_to(REPO))
            if path.is_file() and path not in seen and not rel.startswith(HISTORICAL):
                seen.add(path)
                yield rel, path.read_text(errors="replace")
    yield "gpu-goodput-exporter --help", cli.parser().format_help()


def stated_sizes(text: str) -> list[tuple[int, int]]:
    """(line, number of GPUs) for every statement of the simulated node's size."""
    flat = re.sub(r"\s+", " ", text)
    out = []
    for pattern in SIZE:
        for m in pattern.finditer(flat):
            # map the flattened offset back to a line of the original text
            words_before = len(flat[: m.start()].split())
            line = text[: _offset_of_word(text, words_before)].count("\n") + 1
            out.append((line, _number(m[1])))
    return out


def _offset_of_word(text: str, n: int) -> int:
    matches = list(re.finditer(r"\S+", text))
    return matches[min(n, len(matches) - 1)].start() if matches else 0


def test_config_default_is_the_simulated_node() -> None:
    assert Settings.model_fields["simulate_gpus"].default == len(NODE), (
        "exporter/settings/core.py simulate_gpus default must equal "
        "len(exporter/sim/patterns.py NODE)")


def test_every_statement_of_the_node_size_agrees() -> None:
    found, wrong = 0, []
    for where, text in _texts():
        for line, n in stated_sizes(text):
            found += 1
            if n != len(NODE):
                wrong.append(f"{where}:{line}: says {n} GPUs")
    assert found >= 4, "the patterns no longer find the statements (README, --help, Makefile...)"
    assert not wrong, (f"the simulated node has {len(NODE)} GPUs (exporter/sim/patterns.py "
                       "NODE; config default simulate_gpus):\n" + "\n".join(wrong))


def test_the_size_check_sees_a_wrong_number() -> None:
    assert [n for _, n in stated_sizes("on the\nsimulated 8-GPU node")] == [8]
    assert [n for _, n in stated_sizes("eight simulated H100s")] == [8]
    assert [n for _, n in stated_sizes("| `--simulate-gpus N` | 11 | GPUs |")] == [11]


def test_readme_workload_table_is_the_simulated_node() -> None:
    text = (REPO / "README.md").read_text()
    table = text.split("<!-- sim-node:", 1)[1].split("\n\n", 1)[0]
    rows = re.findall(r"^\| (\d+) \| `(\w+)` \| (.*) \|$", table, re.M)
    assert [(int(i), name) for i, name, _ in rows] == [
        (i, w.name) for i, w in enumerate(NODE)], (
        "README.md's simulated-node table must list exporter/sim/patterns.py NODE in order")
    lost = [i for i, w in enumerate(NODE) if w.lost_after is not None]
    for i in lost:
        assert f"{LOST_AFTER_SECONDS:g} s" in rows[i][2], rows[i]


def test_readme_says_what_make_run_runs() -> None:
    # --no-print-directory: under `make test` this is a sub-make, which would otherwise
    # print "Entering directory" lines around the commands.
    dry = subprocess.run(["make", "-n", "--no-print-directory", "run"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout.strip().splitlines()
    readme = re.sub(r"\s+", " ", (REPO / "README.md").read_text())
    claimed = re.findall(r"`make run` first creates `\.venv` with the runtime dependencies "
                         r"\(`([^`]+)`\), then runs `([^`]+)`", readme)
    assert claimed, "README.md no longer says what `make run` runs in the checked words"
    assert list(claimed[0]) == dry, f"README says {claimed[0]}, `make -n run` prints {dry}"


def test_readme_says_what_make_test_needs() -> None:
    from tests.support import llamacpp

    readme = re.sub(r"\s+", " ", (REPO / "README.md").read_text())
    for fact in ("llama-server", "cmake", "C++ compiler", "~/.cache/gpu-goodput-exporter",
                 "apt-get install cmake g++", "prometheus-alertmanager"):
        assert fact in readme, f"README.md's `make test` paragraph no longer mentions {fact}"
    assert llamacpp.cache_root().name == "gpu-goodput-exporter"


def test_nothing_says_to_pip_install_from_an_index() -> None:
    """Nothing is published: every pip install names a checkout, `.` or a wheel."""
    bad = [f"{where}:{text[: m.start()].count(chr(10)) + 1}"
           for where, text in _texts()
           for m in re.finditer(r"pip install (?:-\S+ )*['\"]?gpu-goodput-exporter\b", text)]
    assert not bad, "pip install gpu-goodput-exporter: nothing is on PyPI:\n" + "\n".join(bad)


def test_systemd_unit_flags_parse() -> None:
    unit = (REPO / "deploy/systemd/gpu-goodput-exporter.service").read_text()
    exec_start = re.search(r"^ExecStart=(.*?)(?<!\\)$", unit.replace("\\\n", " "), re.M)
    assert exec_start
    argv = shlex.split(exec_start[1])
    assert argv[0].endswith("/bin/gpu-goodput-exporter")
    cli.parser().parse_args(argv[1:])
    # `systemctl reload` is the daemon's SIGHUP reload (issue 22).
    assert re.search(r"^ExecReload=/bin/kill -HUP \$MAINPID$", unit, re.M)


def _rss_figures(text: str) -> list[str]:
    """"82.1 MiB" and "59 MiB" as written; "~20 MiB" (approximate) left out."""
    return re.findall(r"(?<![~\d.])(\d+(?:\.\d+)?) MiB", text)


def test_footprint_figures_come_from_benchmarks() -> None:
    bench = (REPO / "docs/benchmarks.md").read_text()
    values = (REPO / "helm/gpu-goodput-exporter/values.yaml").read_text()
    chart_comment = values.split("# -- Resources.", 1)[1].split("\nresources:", 1)[0]
    install_row = next(line for line in (REPO / "docs/install.md").read_text().splitlines()
                       if "measured RSS" in line)
    for where, text in (("values.yaml resources comment", chart_comment),
                        ("docs/install.md resources row", install_row)):
        figures = _rss_figures(text)
        assert figures, f"{where}: no RSS figure found"
        missing = [f for f in figures if not re.search(rf"(?<![\d.]){re.escape(f)} MiB", bench)]
        assert not missing, (f"{where} quotes {missing} MiB, which docs/benchmarks.md does not "
                             "report: quote a measured figure")
        assert "8-GPU" not in text


# ------------------------------------------------------------- scrape size, measured

def _get(url: str, gzip_ok: bool = False) -> bytes:
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"} if gzip_ok else {})
    with urllib.request.urlopen(request, timeout=5) as response:
        return bytes(response.read())


@pytest.fixture(scope="module")
def default_node() -> Iterator[str]:
    """The daemon as `--simulate` runs it, once every source has published."""
    proc = DaemonProcess("--simulate", "--interval", "0.5")
    proc.start()
    try:
        deadline = time.monotonic() + 60
        while True:
            text = _get(proc.url + "/metrics").decode()
            if all(text.count(f"{name}{{") >= len(NODE) for name in
                   ("goodput_gpu_sm_active_seconds_total", "goodput_gpu_regime")):
                break
            assert time.monotonic() < deadline, "the sources never all published"
            time.sleep(0.2)
        yield proc.url
    finally:
        proc.stop()


def test_documented_scrape_size_is_measured(default_node: str) -> None:
    """The steady scrape: some families (a job's verdicts, a shared GPU's holders) appear a
    few polls after every source has first published, so wait until the size settles."""
    plain, deadline = 0.0, time.monotonic() + 20
    while time.monotonic() < deadline:
        size = len(_get(default_node + "/metrics")) / 1000
        if plain and abs(size - plain) <= 0.01 * size:
            break
        plain = size
        time.sleep(1.0)
    plain = len(_get(default_node + "/metrics")) / 1000
    zipped = len(_get(default_node + "/metrics", gzip_ok=True)) / 1000
    kb, gz = metrics_docs.SIM_SCRAPE_KB, metrics_docs.SIM_SCRAPE_GZIP_KB
    assert abs(plain - kb) <= 0.05 * kb, (
        f"a scrape of the simulated node is {plain:.1f} KB; exporter/docgen/metrics.py "
        f"SIM_SCRAPE_KB says {kb}: update it and run `python -m exporter.docgen.metrics`")
    assert abs(zipped - gz) <= 0.15 * gz, (
        f"gzipped it is {zipped:.1f} KB; SIM_SCRAPE_GZIP_KB says {gz}: update it and run "
        "`python -m exporter.docgen.metrics`")


def test_stack_alert_table_matches_the_node_and_rules() -> None:
    """docs/dashboards.md's table of what `make stack` delivers names real alerts, each on
    the GPU whose workload raises it (tests/test_alerts_on_sim.py EXPECTED; the XID comes
    from the GPU that falls off the bus). The timing itself was measured by hand."""
    import yaml

    from tests.test_alerts_on_sim import EXPECTED

    text = (REPO / "docs/dashboards.md").read_text()
    table = text.split("| when | alerts", 1)[1].split("\n\n", 1)[0]
    pairs = re.findall(r"`(\w+)` \(gpu (\d+)", table)
    assert len(pairs) >= 6, table
    rules = yaml.safe_load((REPO / "alerts/goodput_alerts.rules.yml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    lost = str(next(i for i, w in enumerate(NODE) if w.lost_after is not None))
    for alert, gpu in pairs:
        assert alert in alerts, f"docs/dashboards.md names alert {alert}, which does not exist"
        if alert == "GPUXidCritical":
            assert gpu == lost, f"the XID comes from gpu {lost}, the one that is lost"
        elif EXPECTED.get(alert):
            assert gpu in EXPECTED[alert], (
                f"docs/dashboards.md: {alert} fires for gpu {sorted(EXPECTED[alert])} on the "
                f"simulated node, not gpu {gpu}")


# ------------------------------------------------------------- image size, one source

IMAGE_SOURCE = re.compile(r"(\d+\.\d) MB image \(`\.ci/image_smoke\.py`")
IMAGE_STATED = re.compile(r"(?:(\d+\.\d) MB image|image[^.|]{0,80}?size: (\d+\.\d) MB)", re.S)


def test_every_statement_of_the_image_size_is_the_measured_one() -> None:
    """docs/benchmarks.md's footprint table holds the measured image size; every other
    statement of it (docs/install.md) says the same number."""
    source = IMAGE_SOURCE.findall((REPO / "docs" / "benchmarks.md").read_text())
    assert len(source) == 1, "docs/benchmarks.md states the image size once, in its table"
    stated = {
        (rel, a or b) for rel, text in _texts() for a, b in IMAGE_STATED.findall(text)
    }
    assert ("docs/install.md", source[0]) in stated
    assert {n for _, n in stated} == {source[0]}, stated
