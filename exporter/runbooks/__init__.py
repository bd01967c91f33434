"""The alert runbooks, shipped in the package and served by the daemon at /runbooks/.

No public site hosts this project's runbooks, so every alert's ``runbook_url`` points at the
exporters themselves (the chart's Service, or localhost for a bare install): the link works
on the day of the install, behind the same web config (TLS, basic auth) as /metrics. The
pages are read once when the app is built; a request is a dictionary lookup, never a file
name built from the URL, and nothing here touches a GPU.
"""

from __future__ import annotations

import html
from importlib import resources

from aiohttp import web

_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title></head>
<body>
<p><a href="./">All runbooks</a></p>
<pre style="white-space: pre-wrap; max-width: 100ch">{body}</pre>
</body></html>
"""

_INDEX = """<!doctype html>
<html><head><meta charset="utf-8"><title>gpu-goodput-exporter runbooks</title></head>
<body>
<h1>Runbooks</h1>
<p>What to do when an alert of gpu-goodput-exporter fires. Each page is also served as
Markdown (<code>Accept: text/markdown</code>).</p>
<ul>
{items}
</ul>
</body></html>
"""

# Plain pages with no script, style sheet or frame of their own to load.
_HEADERS = {"Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'",
            "X-Content-Type-Options": "nosniff"}


def load() -> dict[str, str]:
    """AlertName -> the Markdown of its runbook, from the package's own files."""
    root = resources.files(__name__)
    return {entry.name.removesuffix(".md"): entry.read_text(encoding="utf-8")
            for entry in root.iterdir() if entry.name.endswith(".md")}


def _wants_markdown(accept: str | None) -> bool:
    """A client asking for Markdown and not HTML (a browser always asks for HTML)."""
    accept = accept or ""
    return "text/markdown" in accept and "text/html" not in accept


def add_routes(app: web.Application) -> list[str]:
    """Serve ``/runbooks/`` (an index) and ``/runbooks/<AlertName>`` (also with ``.md``,
    the form a runbook_url takes); returns the alert names served."""
    pages = load()
    rendered = {name: _PAGE.format(title=html.escape(f"{name} - runbook"),
                                   body=html.escape(text))
                for name, text in pages.items()}
    items = "\n".join(f'<li><a href="{html.escape(name)}">{html.escape(name)}</a></li>'
                      for name in sorted(pages))
    index = _INDEX.format(items=items)

    async def list_all(_: web.Request) -> web.Response:
        return web.Response(text=index, content_type="text/html", headers=_HEADERS)

    async def to_index(_: web.Request) -> web.Response:
        raise web.HTTPFound("runbooks/")

    async def one(request: web.Request) -> web.Response:
        name = request.match_info["name"].removesuffix(".md")
        if name not in pages:
            return web.Response(status=404, text=f"no runbook named {name[:64]!r}; "
                                "the list is at /runbooks/\n")
        if _wants_markdown(request.headers.get("Accept")):
            return web.Response(text=pages[name], content_type="text/markdown",
                                headers=_HEADERS)
        return web.Response(text=rendered[name], content_type="text/html", headers=_HEADERS)

    app.router.add_get("/runbooks", to_index)
    app.router.add_get("/runbooks/", list_all)
    app.router.add_get("/runbooks/{name}", one)
    return sorted(pages)
