"""Rows as fixed-width text lines: the frame ``top`` paints and ``top --once`` prints.

Pure functions of a :class:`NodeView`, no terminal involved, so the layout is tested as
strings. Plain ASCII, no colour: it reads the same over ssh, in a log, and in tmux.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from exporter.view.holders import of_gpu
from exporter.view.jobs import JobRow
from exporter.view.printable import printable
from exporter.view.rows import GpuRow, NodeView, memory_text

BAR_CELLS = 5
MIN_WHY = 12


def bar(value: float | None, cells: int = BAR_CELLS) -> str:
    """``###..`` for a 0..1 ratio, rounded to the nearest cell; ``-`` centred when not read."""
    if value is None:
        return "-".center(cells)
    full = round(min(max(value, 0.0), 1.0) * cells)
    return "#" * full + "." * (cells - full)


def si(value: float | None, unit: str = "") -> str:
    """A short number: 2.2k, 73G, 0.25."""
    if value is None:
        return "-"
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            shown = value / scale
            return f"{shown:.1f}{prefix}{unit}" if shown < 10 else f"{shown:.0f}{prefix}{unit}"
    return f"{value:.2f}{unit}" if 0 < abs(value) < 10 else f"{value:.0f}{unit}"


@dataclass(frozen=True)
class Column:
    title: str
    width: int
    cell: Callable[[GpuRow], str]
    right: bool = False
    optional: bool = False
    """Dropped when no row has a value (no engine: no tokens column)."""
    drop: int = 0
    """When the line is too narrow, optional columns go highest first."""


COLUMNS: tuple[Column, ...] = (
    Column("GPU", 3, lambda r: f"{r.gpu}{'*' if r.straggler else ' '}", right=True),
    Column("REGIME", 14, lambda r: r.regime if r.up else "down"),
    Column("SM", BAR_CELLS, lambda r: bar(r.sm)),
    Column("TENS", BAR_CELLS, lambda r: bar(r.tensor)),
    Column("DRAM", BAR_CELLS, lambda r: bar(r.dram)),
    Column("BUS/s", 5, lambda r: bar(r.bus) if r.bus is not None else si(
        r.bus_bytes_per_second, "B")),
    Column("POWER", 5, lambda r: si(r.power_watts, "W"), right=True),
    Column("TOK/S", 5, lambda r: si(r.tokens_per_second), right=True, optional=True, drop=2),
    Column("J/TOK", 5, lambda r: si(r.joules_per_token), right=True, optional=True, drop=3),
    Column("JOB", 12, lambda r: r.job, optional=True, drop=1),
)


def _has_value(column: Column, rows: Sequence[GpuRow]) -> bool:
    return any(column.cell(r).strip() not in ("", "-") for r in rows)


def columns_for(rows: Sequence[GpuRow], width: int) -> list[Column]:
    """The columns that carry data, dropped from the right while WHY would get too narrow."""
    shown = [c for c in COLUMNS if not c.optional or _has_value(c, rows)]
    gpu = max((len(r.gpu) + 1 for r in rows), default=3)  # MIG ids (0-13) are wider
    shown[0] = replace(shown[0], width=max(gpu, shown[0].width))
    while len(shown) > 3 and sum(c.width + 1 for c in shown) + MIN_WHY > width:
        optional = [c for c in shown if c.optional]
        victim = max(optional, key=lambda c: c.drop) if optional else shown[-1]
        shown.remove(victim)
    return shown


def _fit(text: str, width: int, right: bool = False) -> str:
    text = printable(text)  # label values come from outside: no control reaches a terminal
    text = text if len(text) <= width else text[: max(width - 1, 0)] + "~"
    return text.rjust(width) if right else text.ljust(width)


def line(row: GpuRow | None, columns: Sequence[Column], width: int) -> str:
    """One row (or the header when ``row`` is None), exactly ``width`` wide."""
    cells = [
        _fit(c.title if row is None else c.cell(row), c.width, c.right) for c in columns
    ]
    used = sum(c.width + 1 for c in columns)
    why = "WHY" if row is None else row.why
    return _fit(" ".join(cells) + " " + why, width) if used < width else _fit(
        " ".join(cells), width)


def detail(row: GpuRow) -> str:
    """Everything about one GPU on one line: the footer of ``top``."""
    parts = [f"GPU {row.gpu}", row.name, row.regime or "-"]
    parts += row.reasons() or [row.why]
    if row.memory_used_bytes is not None:
        parts.append(f"mem {memory_text(row).replace(' ', '')}")
    if row.utilization is not None:
        parts.append(f"util {row.utilization:.0%}")
    for name, value in (("SM", row.sm), ("tensor", row.tensor), ("DRAM", row.dram)):
        if value is not None:
            parts.append(f"{name} {value:.2f}")
    parts.append(f"bus {si(row.bus_bytes_per_second, 'B/s')}")
    if row.tokens_per_second is not None:
        parts.append(f"{si(row.tokens_per_second)} tok/s")
    if row.joules_per_token is not None:
        parts.append(f"{row.joules_per_token:.2f} J/token")
    if row.job:
        parts.append(f"job {row.job} ({row.job_source})")
    return "  ".join(p for p in parts if p)


def frame(view: NodeView, rows: Sequence[GpuRow], width: int, title: str = "",
          selected: int | None = None) -> list[str]:
    """Header, one line per row (``>`` marks the selected one), then the selected detail."""
    width = max(width, 40)
    out = [_fit(title or _title(view, len(rows)), width)]
    if view.error:
        out.append(_fit(f"cannot read: {view.error}", width))
    columns = columns_for(list(view.rows), width - 1)
    out.append(" " + line(None, columns, width - 1))
    for i, row in enumerate(rows):
        mark = ">" if i == selected else " "
        out.append(mark + line(row, columns, width - 1))
        out += [_fit(f"      {h.text()}", width) for h in of_gpu(view.holders, row.gpu)]
    out += [_fit(job_line(job), width) for job in jobs_of(view, rows)]
    if selected is not None and 0 <= selected < len(rows):
        out.append(_fit(detail(rows[selected]), width))
    return out


def jobs_of(view: NodeView, rows: Sequence[GpuRow]) -> list[JobRow]:
    """The multi-GPU jobs holding a GPU among ``rows`` (a filter keeps its jobs' lines)."""
    shown = {r.gpu for r in rows}
    return [job for job in view.jobs if shown & set(job.gpus)]


def job_line(job: JobRow) -> str:
    """`` job 4242 (slurm) GPUs 9*,10  work 0.61 xfer 0.05 wait 0.33 host 0.01 idle 0.00``:
    fits 80 columns for a short job id; ``*`` marks the straggler, as in the GPU column."""
    gpus = ",".join(f"{g}*" if g == job.straggler else g for g in job.gpus)
    return f" job {job.name} ({job.job_source}) GPUs {gpus}  {job.split_text()}"


def _title(view: NodeView, shown: int) -> str:
    gpus = f"{shown}/{len(view.rows)} GPUs" if shown != len(view.rows) else f"{shown} GPUs"
    return f"node {view.node or '?'}  {view.backend or '?'}  {gpus}  exporter {view.version}"
