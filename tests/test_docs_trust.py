"""docs/serving.md "Trust" names every bound with its default and the counter that says it
was hit (issue 22): the table is checked against the settings and the reasons in the code,
so a new bound or a changed default cannot leave it behind."""

from __future__ import annotations

import re

import pytest

from exporter.sources.serving.accumulate import DROP_REASONS
from exporter.sources.serving.config import ServingConfig
from exporter.web.login_guard import FAILURE_REASONS
from tests.conftest import REPO

UNITS = {"": 1.0, "s": 1.0, "characters": 1.0, "MiB": 1024.0 * 1024.0}
# Every serving setting that bounds what an engine or a config can make the exporter do.
BOUNDS = sorted(
    name for name in ServingConfig.model_fields
    if name.startswith("max_") or name in ("stale_after", "timeout")
)


def trust_section() -> str:
    text = (REPO / "docs" / "serving.md").read_text()
    start = text.index("\n## Trust\n")
    return text[start: text.index("\n## ", start + 1)]


def rows() -> dict[str, list[str]]:
    out = {}
    for line in trust_section().splitlines():
        if line.startswith("| `serving."):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            out[cells[0].strip("`").removeprefix("serving.")] = cells
    return out


@pytest.mark.parametrize("name", BOUNDS)
def test_every_serving_bound_has_a_row_with_its_default(name: str) -> None:
    found = rows()
    assert name in found, f'docs/serving.md "Trust" has no row for serving.{name}'
    m = re.fullmatch(r"([\d,.]+)\s*(\S*)", found[name][1])
    assert m and m[2] in UNITS, f"serving.{name}: default cell {found[name][1]!r}"
    stated = float(m[1].replace(",", "")) * UNITS[m[2]]
    assert stated == float(ServingConfig.model_fields[name].default), name


def test_every_reason_a_bound_counts_is_named() -> None:
    text = trust_section()
    for reason in (*DROP_REASONS, *FAILURE_REASONS, "max_targets", "duplicate", "bad_url",
                   "body_too_large", "mfu_implausible"):
        assert f'"{reason}"' in text, f'docs/serving.md "Trust" never names reason {reason}'
    for family in ("goodput_serving_target_dropped_values_total",
                   "goodput_serving_targets_dropped", "goodput_exporter_http_auth_failures_total",
                   "goodput_exporter_config_last_reload_successful"):
        assert family in text, family
