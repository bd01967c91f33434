"""Rows as fixed-width text lines: the frame ``top`` paints and ``top --once`` prints.

Pure functions of a :class:`NodeView`, no terminal involved, so the layout is tested as
strings. Plain ASCII, no colour: it reads the same over ssh, in a log, and in tmux.
"""

from __future__ import annotations

import functools
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from exporter.view.holders import of_gpu
from exporter.view.jobs import JobRow
from exporter.view.printable import printable
from exporter.view.rows import GpuRow, NodeView, memory_text

BAR_CELLS = 5
MIN_WHY = 20
"""Optional columns give way before the reasons get narrower than this (their short forms,
``throttled: thermal``, ``60 GiB held idle``, fit)."""
DETAIL_LINES = 3
"""The selected GPU's detail takes at most this many lines under the table."""


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


JOB_MAX = 40
"""The job column never grows wider than this; a longer name is shortened."""


def reason_forms(reason: str) -> list[str]:
    """Ways to write one reason, longest first, each whole words that still say what it is:
    ``throttled: hw_thermal_slowdown``, ``throttled: thermal``, ``throttled``."""
    forms = [reason]
    head, sep, tail = reason.partition(": ")
    if head == "allocated idle" and " held" in tail:
        forms.append(tail.split(",", 1)[0] + " idle")  # "60 GiB held idle"
    elif head == "throttled":
        forms.append(f"throttled: {tail.removeprefix('hw_').removeprefix('sw_')}"
                     .removesuffix("_slowdown"))
    elif reason == "busy, no tokens out":
        forms.append("no tokens out")
    if sep:
        forms.append(head)
    return list(dict.fromkeys(f for f in forms if f))


def cut_words(text: str, width: int) -> str:
    """``text`` within ``width``: whole words then ``~``, never a word cut in two."""
    if len(text) <= width:
        return text
    kept = ""
    for word in text.split(" "):
        longer = f"{kept} {word}" if kept else word
        if len(longer) + 1 > width:
            break
        kept = longer
    return (kept.rstrip(";,:") + "~")[:max(width, 0)]


def fit_why(reasons: Sequence[str], width: int) -> str:
    """The reasons within ``width``: all of them whole if they fit, else the later ones in
    fewer words first (the most pressing comes first and keeps its words longest), then
    the last ones left out as ``+N`` (the detail line and a wider terminal show them)."""
    forms = [reason_forms(r) for r in reasons]
    for shown in range(len(forms), 0, -1):
        more = f" +{len(forms) - shown}" if shown < len(forms) else ""
        level = [0] * shown
        while True:
            text = "; ".join(forms[i][level[i]] for i in range(shown)) + more
            if len(text) <= width:
                return text
            i = next((i for i in reversed(range(shown)) if level[i] + 1 < len(forms[i])), None)
            if i is None:
                break
            level[i] += 1
    more = f" +{len(forms) - 1}" if len(forms) > 1 else ""
    return cut_words(forms[0][-1] if forms else "", width - len(more)) + more


def job_forms(name: str, node: str = "") -> list[str]:
    """Shorter ways to write a job name, longest first, each a piece of the name (so it
    still works as a filter): without this node's ``node/`` prefix (a process job's id
    starts with it), without the namespace, then cut after a ``-``, ``_`` or ``.``:
    ``vm/4101-1000001``, ``4101-1000001``, ``4101``."""
    forms = [name]
    rest = name.removeprefix(f"{node}/") if node else name
    forms.append(rest)
    if "/" in rest and "," not in rest:
        rest = rest.split("/", 1)[1]
        forms.append(rest)
    cuts = [i for i, ch in enumerate(rest) if ch in "-_." and i > 0]
    forms += [rest[:i] for i in reversed(cuts)]
    return list(dict.fromkeys(forms))


def job_labels(rows: Sequence[GpuRow], node: str, width: int) -> dict[str, str]:
    """Each job name -> what the JOB column shows within ``width``: the longest form of
    :func:`job_forms` that fits and is part of no other job's name on this node, so it
    cannot be mistaken for another job (``4101`` for ``vm/4101-1000001``). Only a name no
    such form fits is cut, marked ``~``."""
    jobs = _jobs(tuple(sorted({r.job for r in rows if r.job})), node)
    return {name: jobs.label(i, width) for i, name in enumerate(jobs.names)}


class _Jobs:
    """The jobs of one frame with the pieces of their names that tell them apart. Whether a
    piece is part of another job's name takes one search of all names, made only for the
    pieces a width asks about and remembered, so a thousand jobs cost milliseconds."""

    def __init__(self, names: tuple[str, ...], node: str) -> None:
        self.names = names
        self.shown = [printable(n) for n in names]  # as the terminal shows them
        self.forms = [job_forms(text, node) for text in self.shown]
        self.joined = "\n".join(self.shown)
        self.spans: list[tuple[int, int]] = []
        at = 0
        for text in self.shown:
            self.spans.append((at, at + len(text)))
            at += len(text) + 1
        self._clear: dict[tuple[int, str], bool] = {}

    def clear(self, i: int, form: str) -> bool:
        """Whether ``form`` (a piece of job ``i``'s name) is in no other job's name."""
        if (i, form) not in self._clear:
            begin, end = self.spans[i]
            self._clear[(i, form)] = (begin <= self.joined.find(form)
                                      and self.joined.rfind(form) + len(form) <= end)
        return self._clear[(i, form)]

    def label(self, i: int, width: int) -> str:
        for form in self.forms[i]:  # longest first
            if len(form) <= width and self.clear(i, form):
                return form
        return _fit(self.narrowest(i), width).rstrip()

    def narrowest(self, i: int) -> str:
        return next((f for f in reversed(self.forms[i]) if self.clear(i, f)), self.shown[i])


@functools.lru_cache(maxsize=8)
def _jobs(names: tuple[str, ...], node: str) -> _Jobs:
    return _Jobs(names, node)


def _job_need(rows: Sequence[GpuRow], node: str) -> tuple[int, int]:
    """(narrowest, widest) JOB column: every job identifiable / every name whole."""
    jobs = _jobs(tuple(sorted({r.job for r in rows if r.job})), node)
    if not jobs.names:
        return 0, 0
    narrow = max(len(jobs.narrowest(i)) for i in range(len(jobs.names)))
    return max(3, narrow), max(len(text) for text in jobs.shown)


def columns_for(rows: Sequence[GpuRow], width: int, node: str = "") -> list[Column]:
    """The columns that carry data, dropped from the right while WHY would get too narrow.
    The JOB column is as wide as the longest job name where the reasons keep their words,
    and at least wide enough to tell every job apart (:func:`job_labels`)."""
    shown = [c for c in COLUMNS if not c.optional or _has_value(c, rows)]
    gpu = max((len(r.gpu) + 1 for r in rows), default=3)  # MIG ids (0-13) are wider
    shown[0] = replace(shown[0], width=max(gpu, shown[0].width))
    narrow, wide = _job_need(rows, node)
    shown = [replace(c, width=min(narrow, JOB_MAX)) if c.title == "JOB" else c for c in shown]
    while len(shown) > 3 and sum(c.width + 1 for c in shown) + MIN_WHY > width:
        optional = [c for c in shown if c.optional]
        victim = max(optional, key=lambda c: c.drop) if optional else shown[-1]
        shown.remove(victim)
    job = next((i for i, c in enumerate(shown) if c.title == "JOB"), None)
    if job is not None:
        why = max((len(r.why) for r in rows), default=0)
        spare = width - sum(c.width + 1 for c in shown) - max(why, MIN_WHY)
        grown = min(max(wide, narrow), JOB_MAX, shown[job].width + max(spare, 0))
        shown[job] = replace(shown[job], width=grown)
    return shown


def _fit(text: str, width: int, right: bool = False) -> str:
    text = printable(text)  # label values come from outside: no control reaches a terminal
    text = text if len(text) <= width else text[: max(width - 1, 0)] + "~"
    return text.rjust(width) if right else text.ljust(width)


def line(row: GpuRow | None, columns: Sequence[Column], width: int,
         jobs: Mapping[str, str] | None = None) -> str:
    """One row (or the header when ``row`` is None), exactly ``width`` wide: the job as
    :func:`job_labels` shortened it, the reasons as :func:`fit_why` fitted them."""
    cells = []
    for c in columns:
        text = c.title if row is None else c.cell(row)
        if row is not None and c.title == "JOB":
            text = (jobs or {}).get(row.job, text)
        cells.append(_fit(text, c.width, c.right))
    used = sum(c.width + 1 for c in columns)
    if used >= width:
        return _fit(" ".join(cells), width)
    if row is None:
        why = "WHY"
    else:
        reasons = row.reasons() or ([row.why] if row.why else [])
        why = fit_why([printable(r) for r in reasons], width - used)
    return _fit(" ".join(cells) + " " + why, width)


def shortened(view: NodeView, rows: Sequence[GpuRow], width: int) -> bool:
    """Whether a row of the frame lost a reason's words, a job's name or a column."""
    columns = columns_for(list(view.rows), width - 1, view.node)
    jobs = job_labels(view.rows, view.node, _job_width(columns))
    used = sum(c.width + 1 for c in columns)
    dropped = any(c not in [d.title for d in columns] for c in _data_titles(view.rows))
    return dropped or any(
        jobs.get(r.job, r.job) != r.job or len(r.why) > width - 1 - used for r in rows)


def _data_titles(rows: Sequence[GpuRow]) -> list[str]:
    return [c.title for c in COLUMNS if not c.optional or _has_value(c, rows)]


def _job_width(columns: Sequence[Column]) -> int:
    return next((c.width for c in columns if c.title == "JOB"), 0)


def wrap(parts: Sequence[str], width: int, lines: int = DETAIL_LINES) -> list[str]:
    """``parts`` joined by two spaces over at most ``lines`` lines of ``width``, broken
    between parts (a part longer than a line breaks between its words)."""
    out = [""]
    for part in parts:
        for piece in [part] if len(part) <= width else _pieces(part, width):
            joined = f"{out[-1]}  {piece}" if out[-1] else piece
            if len(joined) <= width:
                out[-1] = joined
            elif len(out) < lines:
                out.append(piece)
            else:
                out[-1] = cut_words(joined, width)
                return out
    return out


def _pieces(part: str, width: int) -> list[str]:
    out = [""]
    for word in part.split(" "):
        joined = f"{out[-1]} {word}" if out[-1] else word
        if len(joined) <= width or not out[-1]:
            out[-1] = joined
        else:
            out.append(word)
    return out


def detail(row: GpuRow) -> str:
    """Everything about one GPU on one line."""
    return "  ".join(detail_parts(row))


def detail_parts(row: GpuRow) -> list[str]:
    """Everything about one GPU, part by part: the lines under ``top``'s table."""
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
    return [printable(p) for p in parts if p]


HINT = ("~ and +N (more reasons) mark what was shortened: --width {wide} or a wider terminal "
        "shows all; live, j/k spells out one GPU under the table")


def frame(view: NodeView, rows: Sequence[GpuRow], width: int, title: str = "",
          selected: int | None = None) -> list[str]:
    """Header, one line per row (``>`` marks the selected one), then the selected GPU's
    detail (two lines at most), or, with none selected, how to see what was shortened."""
    width = max(width, 40)
    out = [_fit(title or _title(view, len(rows)), width)]
    if view.error:
        out.append(_fit(f"cannot read: {view.error}", width))
    columns = columns_for(list(view.rows), width - 1, view.node)
    jobs = job_labels(view.rows, view.node, _job_width(columns))
    out.append(" " + line(None, columns, width - 1))
    for i, row in enumerate(rows):
        mark = ">" if i == selected else " "
        out.append(mark + line(row, columns, width - 1, jobs))
        out += [_fit(f"      {h.text()}", width) for h in of_gpu(view.holders, row.gpu)]
    out += [_fit(job_line(job), width) for job in jobs_of(view, rows)]
    if selected is not None and 0 <= selected < len(rows):
        row = rows[selected]
        loss = next((j.loss_text() for j in view.jobs if row.gpu in j.gpus), "")
        parts = [*detail_parts(row), *([loss] if loss else [])]
        out += [_fit(text, width) for text in wrap(parts, width)]
    elif rows and shortened(view, rows, width):
        out += textwrap.wrap(HINT.format(wide=full_width(view)), width)
    return out


def full_width(view: NodeView) -> int:
    """The narrowest frame in which no row is shortened (rounded up to ten columns): every
    column with data, whole job names, the longest reasons."""
    titles = set(_data_titles(view.rows))
    gpu = max((len(r.gpu) + 1 for r in view.rows), default=3)
    used = sum((max(gpu, c.width) if c.title == "GPU" else c.width) + 1
               for c in COLUMNS if c.title in titles and c.title != "JOB")
    if "JOB" in titles:
        used += min(_job_need(view.rows, view.node)[1], JOB_MAX) + 1
    why = max((len(printable(r.why)) for r in view.rows), default=0)
    return -(-(used + why + 1) // 10) * 10


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
