"""Generate docs/metrics.md from the collector registry: ``python -m exporter.docgen.metrics
[--check]``.

CI runs ``--check`` so the reference can never drift from what ``/metrics`` serves. It also
states the series count per GPU of the default set on the simulated node, which a test
holds under the budget.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from exporter.collectors import REGISTRY
from exporter.metrics.families import GPU_LABELS, NODE_LABELS
from exporter.metrics.self_metrics import SELF_FAMILIES
from exporter.wiring.config import Settings

# A scrape of the default simulated node, measured; tests/test_docs_numbers.py measures it
# again and fails when it is more than 10 % off, so docs/metrics.md cannot drift.
SIM_SCRAPE_KB = 45
SIM_SCRAPE_GZIP_KB = 7.4

DEFAULT_PATH = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"

HEADER = """# Metrics reference

Generated from the code by `.venv/bin/python -m exporter.docgen.metrics`; do not edit by hand
(CI checks that this file matches the code).

Every per-GPU family carries the labels `{gpu}` and its own labels, nothing else: the GPU's
identity (UUID, model name, PCI bus id, MIG profile) is only on `goodput_gpu_info`, and the
pods holding it only on `goodput_gpu_pod_info`, the job it works for only on
`goodput_gpu_job_info`; join them on `node` and `gpu`. Node-level
families carry `{node}`. Ratios are 0 to 1; counters are cumulative so `rate()` is exact over
any range. Families marked "optional" are not in the default set: turn them on with
`--extended-metrics`.

**Series per GPU.** The default set stays within a budget of 40 series per GPU
(`tests/test_series_budget.py` fails above it): 39 to 40 on the simulated node, whose GPUs
carry NVML, GPM profiling and the model's verdicts, plus the attribution series, which are
not counted: one `goodput_gpu_job_info` for a GPU working for a job, one
`goodput_gpu_pod_info` per pod holding it. A GPU's series only grow with those holders, the
models an engine serves on it, the
clock-event reasons and XIDs it has seen. The simulated node's scrape (`--simulate`,
{sim_gpus} GPUs) is about {scrape_kb} KB, {scrape_gzip_kb} KB gzipped.

| family | type | unit | labels | collector | default | description |
|---|---|---|---|---|---|---|
"""

PROCESS = """
## Families prometheus-client adds

The exporter registers prometheus-client's `ProcessCollector`, which publishes the standard
process families about the exporter itself (Linux only, read from `/proc/self`), without
the `node` label:

| family | type | unit | description |
|---|---|---|---|
| `process_cpu_seconds_total` | counter | seconds | User and system CPU time the exporter spent. |
| `process_resident_memory_bytes` | gauge | bytes | Resident memory size. |
| `process_virtual_memory_bytes` | gauge | bytes | Virtual memory size. |
| `process_start_time_seconds` | gauge | seconds | Start time of the process since the Unix epoch. |
| `process_open_fds` | gauge | - | Open file descriptors. |
| `process_max_fds` | gauge | - | Maximum number of open file descriptors. |

No `_created` series are published: Prometheus detects counter resets itself, and they would
double the series of every counter.
"""


def render() -> str:
    settings = Settings(simulate=True)
    rows = []
    seen: set[str] = set()
    for collector in REGISTRY:
        for group in collector.families(settings):
            base = "per GPU" if group.scope == "gpu" else "node"
            for fam in group.families:
                if fam.name in seen:
                    continue
                seen.add(fam.name)
                extra = ", ".join(f"`{label}`" for label in fam.labels) or "-"
                help_text = fam.help.replace("|", "\\|")
                rows.append(
                    f"| `{fam.name}` | {fam.type} | {fam.unit or '-'} | {base}; {extra} "
                    f"| {collector.name} | {'yes' if fam.default else 'optional'} "
                    f"| {help_text} |"
                )
    for f in SELF_FAMILIES:
        extra = ", ".join(f"`{label}`" for label in f.labels if label != "node") or "-"
        rows.append(
            f"| `{f.name}` | {f.type} | {f.unit or '-'} | node; {extra} | exporter | yes "
            f"| {f.help} |"
        )
    header = HEADER.format(
        gpu="`, `".join(GPU_LABELS),
        node="`, `".join(NODE_LABELS),
        sim_gpus=Settings.model_fields["simulate_gpus"].default,
        scrape_kb=SIM_SCRAPE_KB,
        scrape_gzip_kb=SIM_SCRAPE_GZIP_KB,
    )
    return header + "\n".join(rows) + "\n" + PROCESS


def generated_doc_main(
    render_doc: Callable[[], str], default: Path, module: str, argv: list[str] | None
) -> int:
    """The command line of a generated doc: write it, or with --check fail when the
    committed file differs (CI's way of keeping docs generated from the code)."""
    parser = argparse.ArgumentParser(description=f"Regenerate {default.name} ({module}).")
    parser.add_argument("--check", action="store_true", help="fail if the file is stale")
    parser.add_argument("--path", type=Path, default=default)
    args = parser.parse_args(argv)
    text = render_doc()
    if args.check:
        current = args.path.read_text() if args.path.exists() else ""
        if current != text:
            print(f"{args.path} is stale: run python -m {module}", file=sys.stderr)
            return 1
        return 0
    args.path.parent.mkdir(parents=True, exist_ok=True)
    args.path.write_text(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    return generated_doc_main(render, DEFAULT_PATH, "exporter.docgen.metrics", argv)


if __name__ == "__main__":
    raise SystemExit(main())
