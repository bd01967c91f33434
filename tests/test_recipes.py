"""docs/architecture.md's recipes, tried on a copy of the whole repository (issue #52).

Each test follows one recipe to the letter, editing only the files the recipe names in a
copy of the whole tree (tests/support/repo_copy.py: the chart, the tests, the mixin, the
docs too), regenerates what the recipe says, runs the area's own tests and generated-file
checks there, and checks that the new thing works end to end, not only that it compiles:

- a job source whose launches span nodes, alone on one GPU of this node (Flux,
  ``FLUX_JOB_ID``): the real daemon judges its job (``goodput_job_gpus``, waited seconds,
  the time split);
- a regime that is busy and that a waiting rank can show (``power_bound``): one window of
  it making tokens is conclusive, a waiting rank in it has its waiting counted, and the
  alert's regime regex follows what it declares;
- an engine with a time-to-first-token histogram: the serving recording rule sums it.

Each failed before the declarations carried these properties (the job source was never
judged, the regime never conclusive nor its waiting counted, the histogram never summed).
The six tests take about 40 s together on two cores shared with other work.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from exporter.model import regimes
from exporter.sim.fake_proc import write_proc
from exporter.sim.patterns import NODE
from testkit.harness import http_get
from tests.support import repo_copy

# -- a job source that spans nodes ---------------------------------------------------------------

FLUX_GPU = 10
"""The simulated node's collective_wait GPU, a rank that waits on peers elsewhere: its one
process carries ``FLUX_JOB_ID`` (and no Slurm job), so its job has one GPU here."""


def _add_flux(root: Path) -> None:
    """The job-source recipe for a source read from the environment: its declaration next to
    the others, its row in docs/jobs.md's table, and the regenerated settings reference."""
    repo_copy.replace(
        root, "exporter/sources/jobs/identity.py",
        '"""A process session: the weakest word, what names a job nothing else names."""\n',
        '"""A process session: the weakest word, what names a job nothing else names."""\n'
        'FLUX = JobSource("flux", 35, spans_nodes=True, variables=("FLUX_JOB_ID",))\n'
        '"""A Flux job: its id in the environment of every task the broker starts."""\n')
    hpc_row = next(line for line in (root / "docs" / "jobs.md").read_text().splitlines()
                   if line.startswith("| `hpc` |"))
    repo_copy.replace(root, "docs/jobs.md", hpc_row + "\n", hpc_row + "\n"
                      "| `flux` | `FLUX_JOB_ID` in the process's environment (Flux's job id) "
                      "| that value | `jobs_proc` | 35 | yes |\n")
    repo_copy.regenerate(root, repo_copy.generators("settings"))


@pytest.fixture(scope="module")
def flux_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = repo_copy.whole(tmp_path_factory.mktemp("flux"))
    _add_flux(root)
    return root


def _job_series(url: str) -> list[tuple[str, dict[str, str], float]]:
    status, body = http_get(url + "/metrics", timeout=5)
    assert status == 200
    return [(s.name, s.labels, s.value) for f in text_string_to_metric_families(body)
            for s in f.samples if s.name.startswith(("goodput_gpu_job", "goodput_job"))]


def test_a_job_source_that_spans_nodes_is_judged_with_one_gpu_here(
    flux_root: Path, tmp_path: Path
) -> None:
    workloads = tuple(replace(w, job=(("FLUX_JOB_ID", "f-77"),)) if i == FLUX_GPU else w
                      for i, w in enumerate(NODE))
    write_proc(str(tmp_path), workloads)
    flux = {"job_source": "flux", "job_id": "f-77", "gpu": str(FLUX_GPU)}
    with repo_copy.daemon(flux_root, "--simulate", "--interval", "0.2",
                          "--proc-root", str(tmp_path)) as url:
        deadline = time.monotonic() + 30
        while True:
            series = _job_series(url)
            mine = [(n, lb, v) for n, lb, v in series
                    if lb.get("job_source") == "flux" and lb.get("job_id") == "f-77"]
            gpus = [v for n, _, v in mine if n == "goodput_job_gpus"]
            waited = [v for n, lb, v in mine if n == "goodput_gpu_job_wait_seconds_total"
                      and lb["gpu"] == flux["gpu"]]
            parts = {lb["part"]: v for n, lb, v in mine
                     if n == "goodput_gpu_job_seconds_total" and lb["gpu"] == flux["gpu"]}
            if gpus and waited and waited[0] > 0 and sum(parts.values()) > 0:
                break
            assert time.monotonic() < deadline, (gpus, waited, parts, series[:20])
            time.sleep(0.3)
    info = [lb for n, lb, _ in series if n == "goodput_gpu_job_info" and lb["gpu"] == "10"]
    assert [(lb["job_source"], lb["job_id"]) for lb in info] == [("flux", "f-77")]
    assert gpus == [1.0]
    assert parts["waiting"] > 0  # a rank waiting on its peers elsewhere


def test_the_job_source_recipe_keeps_the_repository_whole(flux_root: Path) -> None:
    """The reference generated from its declaration names its variable; the documented
    table, the scan for second lists, the job tests and the chart's hold on the daemon's
    schema pass in the copy; nothing but the recipe's files changed."""
    settings = (flux_root / "docs" / "settings.md").read_text()
    assert "FLUX_JOB_ID" in next(x for x in settings.splitlines() if "`jobs.environ`" in x)
    repo_copy.check(flux_root)
    repo_copy.pytest(flux_root, "tests/test_job_ranking.py", "tests/test_declared_once.py",
                     "tests/jobs/test_procfs.py",
                     "tests/test_helm_chart.py::test_chart_names_every_collector_of_the_registry",
                     "tests/test_helm_chart.py::test_rendered_daemon_config_passes_the_daemon_schema")
    assert repo_copy.changed(flux_root) == [
        "docs/jobs.md", "docs/settings.md", "exporter/sources/jobs/identity.py"]


# -- a regime that is busy and that a waiting rank can show ---------------------------------------

POWER_RULE = '''    if (w.power_limit_watts and w.power_watts is not None
            and w.power_watts >= cfg.power_cap_min_ratio * w.power_limit_watts):
        return regimes.POWER_BOUND  # the kernels run at the power cap's clocks
'''


def _add_power_bound(root: Path, moves_data: bool = False,
                     generators: tuple[tuple[str, ...], ...] = repo_copy.GENERATORS) -> None:
    """The regime recipe: the declaration, its rule and threshold, its prose, its table row,
    the regenerated files."""
    repo_copy.replace(root, "exporter/model/regimes.py", 'UNKNOWN = "unknown"\n',
                      'UNKNOWN = "unknown"\nPOWER_BOUND = "power_bound"\n')
    repo_copy.replace(
        root, "exporter/model/regimes.py", '),\n)\n"""Every regime, in the order',
        "),\n"
        f'    Regime(POWER_BOUND, "at its power cap", "#E0752D", {len(regimes.ALL)}, '
        '("power_cap_min_ratio",),\n'
        "           busy=True, wall=False, can_wait=True, hollow_read=True, "
        f"moves_data={moves_data}),\n"
        ')\n"""Every regime, in the order')
    repo_copy.replace(
        root, "exporter/model/config.py", "    straggler_gap: float",
        "    power_cap_min_ratio: float = Field(default=0.97, gt=0, le=1)\n"
        '    """A GPU whose SMs are filled draws at least this share of its power limit: the\n'
        '    cap sets its clocks (power_bound)."""\n'
        "    straggler_gap: float")
    wall = "    # Busy and filling the SMs: name the nearest roofline wall.\n"
    repo_copy.replace(root, "exporter/model/core.py", wall, POWER_RULE + wall)
    repo_copy.replace(root, "docs/efficiency.md", "`compute_bound`, `unknown` (exactly one",
                      "`compute_bound`, `unknown`, `power_bound` (exactly one")
    repo_copy.append(root, "docs/efficiency.md",
                     "\n`power_bound`: kernels fill the SMs while the GPU draws at least "
                     "`power_cap_min_ratio` of its power limit, so the cap sets its clocks.\n")
    repo_copy.replace(
        root, "tests/test_model_regimes.py", "# (case, window, expected regime, hollow_busy)\n"
        "CASES = [\n",
        "# (case, window, expected regime, hollow_busy)\nCASES = [\n"
        '    ("at the power cap", prof(util=0.95, graphics_active=0.95, sm_active=0.9, '
        "sm_occupancy=0.5, tensor_active=0.2, dram_active=0.2, power_watts=690.0), "
        '"power_bound", False),\n')
    repo_copy.regenerate(root, generators)


@pytest.fixture(scope="module")
def power_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = repo_copy.whole(tmp_path_factory.mktemp("power"))
    _add_power_bound(root)
    return root


PROBE = """
import json
from exporter.model.config import ModelConfig
from exporter.model.core import ModelRates, Window, assess
from exporter.model.jobs import JobTracker, judge

cfg = ModelConfig()
capped = dict(profiling_available=True, profiling_age_seconds=0.0, util=0.95,
              graphics_active=0.95, sm_active=0.9, sm_occupancy=0.5, tensor_active=0.2,
              dram_active=0.2, power_watts=690.0, power_limit_watts=700.0, processes=1)
serving = (ModelRates("m", tokens_per_second=500.0, efficiency_tokens_per_second=400.0),)
alone = assess(Window(**capped), cfg)
making = assess(Window(**capped, serving=serving), cfg)
# a rank of a two-GPU job at the cap, its kernels a third hollow, exchanging over NVLink with
# a peer that stalls it (a host stall: short kernel time)
waiting = Window(**{**capped, "sm_active": 0.6, "nvlink_bytes_per_second": 2e9})
peer = Window(profiling_available=True, profiling_age_seconds=0.0, util=0.3,
              graphics_active=0.3, sm_active=0.28, tensor_active=0.1, power_watts=200.0,
              power_limit_watts=700.0, processes=1, nvlink_bytes_per_second=2e9)
job = {"0": (waiting, assess(waiting, cfg)), "1": (peer, assess(peer, cfg))}
tracker = JobTracker()
for _ in range(5):
    judgement = judge(job, tracker, 1.0, cfg)
print(json.dumps({"regime": alone.regime, "alone_strong": alone.strong,
                  "making_strong": making.strong, "waiting_regime": job["0"][1].regime,
                  "waited": judgement.waited_share["0"]}))
"""


def _alert_regex(root: Path) -> str:
    groups = yaml.safe_load((root / "alerts" / "goodput_alerts.rules.yml").read_text())
    rule = next(r for g in groups["groups"] for r in g["rules"]
                if r.get("alert") == "GPUBusyButUnproductive")
    found = re.search(r'regime=~"([^"]+)"', rule["expr"])
    assert found is not None
    return found.group(1)


def test_a_busy_regime_a_waiting_rank_can_show_is_conclusive_and_its_waiting_counted(
    power_root: Path,
) -> None:
    seen = json.loads(repo_copy.ok(repo_copy.run(power_root, "-c", PROBE)))
    assert seen["regime"] == "power_bound" and seen["waiting_regime"] == "power_bound"
    # busy: a window making tokens is conclusive, one without is not (no wall of its own)
    assert seen["making_strong"] and not seen["alone_strong"]
    assert seen["waited"] > 0.1  # a third of its kernel time hollow, less its own kernels'
    # the generated node dashboard, metrics reference and golden exposition show it
    board = json.loads((power_root / "dashboards" / "goodput-node.json").read_text())
    assert "power_bound" in json.dumps(board)
    golden = (power_root / "tests" / "golden" / "simulated-node.prom").read_text()
    assert "compute_bound, unknown, power_bound." in golden  # the regime family's help


def test_the_alert_regex_follows_the_declaration(power_root: Path,
                                                 tmp_path: Path) -> None:
    """power_bound's hollow time is no data moving: GPUBusyButUnproductive still judges
    it. Declared as moving data instead, the regenerated alert leaves it out."""
    assert "power_bound" not in _alert_regex(power_root).split("|")
    moving = repo_copy.whole(tmp_path)
    _add_power_bound(moving, moves_data=True, generators=repo_copy.generators("mixin"))
    assert "power_bound" in _alert_regex(moving).split("|")


def test_the_regime_recipe_keeps_the_repository_whole(power_root: Path) -> None:
    repo_copy.check(power_root)
    repo_copy.pytest(power_root, "tests/test_model_regimes.py", "tests/test_declared_once.py",
                     "tests/test_regime_vocabulary.py", "tests/test_golden_exposition.py",
                     "-k", "not adding_a_regime")
    assert repo_copy.changed(power_root) == [
        "dashboards/goodput-node.json", "docs/efficiency.md", "docs/metrics.md",
        "docs/settings.md", "exporter/model/config.py", "exporter/model/core.py",
        "exporter/model/regimes.py", "tests/golden/simulated-node.prom",
        "tests/test_model_regimes.py"]


# -- an engine with a time-to-first-token histogram -----------------------------------------------

TOY = '''
TOYSERVE = EngineTable(
    engine="toyserve",
    version="1",
    requires=("toyserve:",),
    signals=_alts(
        generation_tokens=r("toyserve:generation_tokens"),
        requests_running=r("toyserve:requests_running"),
    ),
    ttft="toyserve:time_to_first_token_seconds",
    notes="a test-only engine (tests/test_recipes.py)",
)
'''

TOY_CAPTURE = """\
# TYPE toyserve:generation_tokens_total counter
toyserve:generation_tokens_total{model_name="toy"} 77
# TYPE toyserve:requests_running gauge
toyserve:requests_running{model_name="toy"} 2
# TYPE toyserve:time_to_first_token_seconds histogram
toyserve:time_to_first_token_seconds_bucket{model_name="toy",le="0.1"} 3
toyserve:time_to_first_token_seconds_bucket{model_name="toy",le="+Inf"} 4
toyserve:time_to_first_token_seconds_sum{model_name="toy"} 0.9
toyserve:time_to_first_token_seconds_count{model_name="toy"} 4
"""


@pytest.fixture(scope="module")
def engine_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The engine recipe: its alias table (with its histogram) among the tables, a capture
    with its case, a docs/serving.md row, the regenerated mixin."""
    root = repo_copy.whole(tmp_path_factory.mktemp("engine"))
    engines = "exporter/sources/serving/engines.py"
    repo_copy.replace(root, engines, "\nTABLES: tuple[EngineTable, ...] = (\n",
                      TOY + "\n\nTABLES: tuple[EngineTable, ...] = (\n")
    repo_copy.replace(root, engines, "    TRTLLM_SERVE_EARLY,\n)\n",
                      "    TRTLLM_SERVE_EARLY,\n    TOYSERVE,\n)\n")
    repo_copy.append(root, "tests/serving/fixtures/toyserve.txt", TOY_CAPTURE)
    repo_copy.replace(root, "tests/serving/test_engines.py", "CASES = {\n",
                      'CASES = {\n    "toyserve.txt": ("toyserve", "1", {\n'
                      '        ("generation_tokens", "toy", ""): 77.0,\n'
                      '        ("requests_running", "toy", ""): 2.0,\n    }, {}),\n')
    lmdeploy = next(line for line in (root / "docs" / "serving.md").read_text().splitlines()
                    if line.startswith("| `lmdeploy` |"))
    repo_copy.replace(root, "docs/serving.md", lmdeploy + "\n", lmdeploy + "\n"
                      "| `toyserve` | a test-only engine | `toyserve:*` | `/metrics` "
                      "| live |\n")
    repo_copy.regenerate(root, repo_copy.generators("mixin"))
    return root


def test_an_engine_with_a_ttft_histogram_gets_the_ttft_rule(engine_root: Path) -> None:
    groups = yaml.safe_load((engine_root / "alerts" / "goodput.rules.yml").read_text())
    rule = next(r for g in groups["groups"] for r in g["rules"]
                if r.get("record") == "goodput:model_ttft_seconds_bucket:rate5m")
    assert "toyserve:time_to_first_token_seconds_bucket" in rule["expr"]
    repo_copy.check(engine_root)
    repo_copy.pytest(engine_root, "tests/serving/test_engines.py",
                     "tests/test_mixin_reads_exporter.py", "tests/test_declared_once.py")
    assert repo_copy.changed(engine_root) == [
        "alerts/goodput.rules.yml", "docs/serving.md", "exporter/sources/serving/engines.py",
        "tests/serving/fixtures/toyserve.txt", "tests/serving/test_engines.py"]
