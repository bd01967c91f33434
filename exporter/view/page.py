"""The landing page at ``/``: the node's GPUs as an HTML table, the same rows as ``top``.

Self-contained (inline CSS, no script, no external asset), refreshed by the browser every
few seconds, sorted and filtered through the query string, so it works from an air-gapped
node and behind the same TLS and basic auth as ``/metrics`` (the middleware guards every
route). It reads the exporter's own text exposition, never the hardware.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from html import escape
from urllib.parse import urlencode

from aiohttp import web

from exporter.metrics.cache import ExpositionCache, Variant
from exporter.view.holders import FLAG_WORDS, of_gpu
from exporter.view.jobs import MEANING, JobRow
from exporter.view.rows import (
    RATE_WINDOW,
    REGIME_WHY,
    SORTS,
    GpuRow,
    NodeView,
    Rates,
    arrange,
    counter_lines,
    memory_text,
    parse,
)
from exporter.view.table import si

REFRESH_SECONDS = 2
HEADERS_SECURITY: tuple[tuple[str, str], ...] = (
    # Nothing but its own inline style: no script, no image, no frame, no other origin.
    ("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; "
     "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),  # frame-ancestors for browsers without CSP level 2
    ("Referrer-Policy", "no-referrer"),
)
"""Sent with the landing page: a label value that slipped past escaping still could not
run, load or frame anything (docs/security.md)."""
STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.2em;color:#111;background:#fff}
h1{font-size:1.25em;margin:0 0 .3em}
h2{font-size:1.05em;margin:1em 0 .3em}
table{border-collapse:collapse;width:100%}
table.jobs{width:auto}
th,td{padding:.25em .5em;border-bottom:1px solid #ddd;text-align:left;white-space:nowrap}
th a{color:inherit}
td.n{text-align:right;font-variant-numeric:tabular-nums}
td.why{white-space:normal}
tr.warn td{background:#fff4e0}
tr.down td{background:#fde2e2}
.bar{display:inline-block;width:4em;height:.7em;border:1px solid #888;margin-right:.3em;
vertical-align:middle}
.bar span{display:block;height:100%;background:#2b6cb0}
small,.muted{color:#555}
form{margin:.5em 0}
"""


def bar(value: float | None) -> str:
    if value is None:
        return '<span class="muted">-</span>'
    pct = round(min(max(value, 0.0), 1.0) * 100)
    return f'<span class="bar"><span style="width:{pct}%"></span></span>{value:.2f}'


def _row(row: GpuRow) -> str:
    kind = "down" if not row.up else "warn" if row.reasons() else ""
    bus = bar(row.bus) if row.bus is not None else escape(si(row.bus_bytes_per_second, "B/s"))
    memory = memory_text(row)
    cells = (
        f"<td>{escape(row.gpu)}{' <b title=straggler>*</b>' if row.straggler else ''}</td>",
        f"<td>{escape(row.regime if row.up else 'down')}</td>",
        f'<td class="why">{escape(row.why)}</td>',
        f"<td>{bar(row.sm)}</td><td>{bar(row.tensor)}</td><td>{bar(row.dram)}</td>",
        f"<td>{bus}</td>",
        f'<td class="n">{escape(si(row.power_watts, " W"))}</td>',
        f'<td class="n">{escape(si(row.tokens_per_second))}</td>',
        f'<td class="n">{escape(si(row.joules_per_token))}</td>',
        f'<td class="n">{escape(memory)}</td>',
        f"<td>{escape(row.job)}</td>",
    )
    return f'<tr class="{kind}">' + "".join(cells) + "</tr>"


def _holder_rows(view: NodeView, row: GpuRow) -> str:
    """The pods (or processes) sharing ``row``'s GPU, one row each under it."""
    out = []
    for h in of_gpu(view.holders, row.gpu):
        kind = "warn" if h.flags else ""
        out.append(
            f'<tr class="holder {kind}"><td></td><td>{escape(h.regime or "-")}</td>'
            f'<td class="why">{escape(h.who)}: share {escape(_share(h.share))} of the GPU'
            f'{escape("; " + ", ".join(FLAG_WORDS.get(f, f) for f in h.flags)) if h.flags else ""}'
            f"</td><td>{bar(h.sm)}</td>"
            f'<td colspan="3"></td><td></td><td class="n">{escape(si(h.tokens_per_second))}</td>'
            f'<td colspan="3"></td></tr>')
    return "".join(out)


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


HEADERS: tuple[tuple[str, str | None], ...] = (
    ("GPU", "gpu"), ("Regime", "regime"), ("Why", None), ("SM active", "sm"),
    ("Tensor", "tensor"), ("DRAM", "dram"), ("Bus", None), ("Power", "power"),
    ("Tokens/s", "tokens"), ("J/token", None), ("Memory", None), ("Job", "job"),
)


def _head(sort: str, filter_text: str) -> str:
    cells = []
    for title, key in HEADERS:
        if key is None:
            cells.append(f"<th>{title}</th>")
            continue
        query = urlencode({"sort": key, **({"filter": filter_text} if filter_text else {})})
        mark = " &#9660;" if key == sort else ""
        cells.append(f'<th><a href="?{escape(query)}">{title}</a>{mark}</th>')
    return "<tr>" + "".join(cells) + "</tr>"


JOB_HEADERS = ("Job", "Source", "GPUs", "Straggler", "Work", "Transfer", "Wait", "Host",
               "Idle", "Tokens/s per working GPU")
_PART_OF = {"Work": "working", "Transfer": "transferring", "Wait": "waiting",
            "Host": "host_stalled", "Idle": "idle"}


def _jobs(jobs: Sequence[JobRow]) -> str:
    """The multi-GPU jobs: GPUs, straggler, each part's share of the job's GPU time (what
    each means below the table, in words an operator acts on) and, for a serving job, its
    tokens per GPU-second working."""
    if not jobs:
        return ""
    rows = []
    for job in jobs:
        shares = [f'<td class="n">{v:.2f}</td>' for _, v in job.shares] or [
            '<td class="n">-</td>'] * 5
        per = job.tokens_per_working_second
        tokens = f'<td class="n">{per:.0f}</td>' if per is not None else '<td class="n">-</td>'
        rows.append(
            f'<tr class="{"warn" if job.straggler else ""}"><td>{escape(job.name)}</td>'
            f"<td>{escape(job.job_source)}</td><td>{escape(', '.join(job.gpus))}</td>"
            f"<td>{escape(job.straggler or '-')}</td>{''.join(shares)}{tokens}</tr>")
    head = "".join(
        f'<th title="{escape(MEANING[_PART_OF[h]])}">{h}</th>' if h in _PART_OF
        else f"<th>{h}</th>" for h in JOB_HEADERS)
    legend = "; ".join(f"<b>{h}</b>: {escape(MEANING[part])}" for h, part in _PART_OF.items())
    return (f'<h2>Multi-GPU jobs</h2><table class="jobs"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>"
            f'<p class="legend">Where each job\'s GPU time went. {legend}.</p>')


def _docs(docs: Sequence[str]) -> str:
    if not docs:
        return ("Documentation: README.md and docs/ in the exporter's source (docs/top.md for "
                "this page, docs/efficiency.md for regimes and reasons, docs/metrics.md for "
                "every series)")
    links = ", ".join(f'<a href="docs/{escape(d)}">{escape(d)}</a>' for d in docs)
    return f'Documentation (<a href="docs/">docs/</a> of this checkout): {links}'


def render(view: NodeView, rows: Sequence[GpuRow], sort: str, filter_text: str,
           debug_state: bool = True, docs: Sequence[str] = ()) -> str:
    """The whole page as a string (a pure function: tests read it without a server)."""
    links = ['<a href="metrics">/metrics</a>', '<a href="runbooks/">/runbooks/</a>',
             '<a href="healthz">/healthz</a>', '<a href="readyz">/readyz</a>']
    if debug_state:
        links.append('<a href="debug/state">/debug/state</a>')
    shown = f"{len(rows)} of {len(view.rows)}" if len(rows) != len(view.rows) else len(rows)
    glossary = "".join(
        f"<li><b>{escape(k)}</b>: {escape(v)}</li>" for k, v in REGIME_WHY.items()
    )
    words = filter_text.lower().split()
    jobs = [j for j in view.jobs if all(w in j.text() for w in words)]
    body = "".join(_row(r) + _holder_rows(view, r) for r in rows) or (
        f'<tr><td colspan="{len(HEADERS)}">no GPU matches</td></tr>' if view.rows else
        f'<tr><td colspan="{len(HEADERS)}">no GPU read yet</td></tr>')
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="{REFRESH_SECONDS}">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>{escape(view.node)}: gpu-goodput-exporter</title><style>{STYLE}</style></head>
<body>
<h1>Node {escape(view.node)}: {shown} GPUs, is each doing useful work?</h1>
<p class="muted">gpu-goodput-exporter {escape(view.version)}, backend
{escape(view.backend)}; refreshes every {REFRESH_SECONDS} s. {' · '.join(links)}</p>
<form method="get"><input type="hidden" name="sort" value="{escape(sort)}">
<label>Filter <input name="filter" value="{escape(filter_text)}"
placeholder="regime, reason, job or GPU"></label> <button>apply</button></form>
<table><thead>{_head(sort, filter_text)}</thead><tbody>{body}</tbody></table>
{_jobs(jobs)}
<p><small>* straggler: the GPU its job waits on. Rates (bus, tokens/s, throttling, a job's
split of its GPU time) are averaged over the daemon's last {RATE_WINDOW:.0f} s. Memory in GiB,
as nvidia-smi counts it. Regimes:</small></p>
<ul class="muted">{glossary}</ul>
<p><small>{_docs(docs)}; what to do when an alert fires:
<a href="runbooks/">/runbooks/</a>.</small></p>
</body></html>
"""


Handler = Callable[[web.Request], Awaitable[web.Response]]


def handler(exposition: ExpositionCache, debug_state: bool = True,
            docs: Sequence[str] = ()) -> Handler:
    """The ``/`` route: parse the cached text exposition (encoded off the event loop when it
    is not cached yet) and render, with rates against the daemon's own bodies of the last
    seconds, kept as they are encoded: the first load already shows every rate."""
    rates = Rates()
    lock = threading.Lock()
    latest: list[tuple[float, bytes]] = []
    """When the newest body was encoded: its counters are as of then, not of the request."""

    def observed(now: float, body: bytes) -> None:
        with lock:
            latest[:] = [(now, body)]
            if rates.wants(now):
                rates.add(now, counter_lines(body))

    exposition.observe(observed)
    last: list[tuple[bytes, NodeView]] = []
    """The last body parsed and its rows: a reload within one poll round parses nothing."""

    def page(sort: str, filter_text: str) -> str:
        body = exposition.body(Variant())
        with lock:  # one Rates, shared with the encoder's thread and concurrent requests
            if last and last[0][0] is body:
                view = last[0][1]
            else:
                now = latest[0][0] if latest and latest[0][1] is body else time.monotonic()
                view = parse(body.decode("utf-8", "replace"), rates, now=now, keep=False)
                last[:] = [(body, view)]
        return render(view, arrange(view.rows, sort, filter_text), sort, filter_text,
                      debug_state, docs)

    async def landing(request: web.Request) -> web.Response:
        sort = request.query.get("sort", "gpu")
        sort = sort if sort in SORTS else "gpu"
        filter_text = request.query.get("filter", "")[:200]
        # parsing ~50 KB of exposition takes milliseconds: off the event loop, like encoding
        text = await asyncio.get_running_loop().run_in_executor(None, page, sort, filter_text)
        response = web.Response(text=text, content_type="text/html")
        response.headers.update(HEADERS_SECURITY)
        return response

    return landing


def pages(
    exposition: ExpositionCache, debug_state: bool = True
) -> Callable[[web.Application], None]:
    """What the daemon hands ``build_app`` (``exporter/web/server.py``): the docs at
    ``/docs/`` and the landing page at ``/``, linking the docs that are served."""
    from exporter.view import docs

    def add(app: web.Application) -> None:
        served = docs.add_routes(app)
        linked = [d for d in docs.LINKED if d in served]
        app.router.add_get("/", handler(exposition, debug_state, linked))

    return add
