"""The project's documentation at ``/docs/<name>.md``, where the daemon runs from a checkout.

No public site hosts these docs, so the landing page links the exporter's own copy: the
Markdown files of ``docs/`` next to the package (a checkout, ``make run``), served as plain
text. An installed package or the image carries no ``docs/``; there the routes are absent
and the page names the files instead. The names are listed once when the app is built: a
request is a lookup in that list, never a path built from the URL.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

DOCS = Path(__file__).resolve().parents[2] / "docs"
LINKED = ("top.md", "efficiency.md", "jobs.md", "metrics.md", "serving.md")
"""The pages the landing page links, in its order."""
_HEADERS = {"Content-Security-Policy": "default-src 'none'", "X-Content-Type-Options": "nosniff"}


def available(root: Path = DOCS) -> dict[str, Path]:
    """File name -> path of every top-level Markdown file of ``root``; empty unless ``root``
    is this project's (an installed package's parent is site-packages, whose ``docs`` may
    be anyone's)."""
    project = root.parent / "pyproject.toml"
    if not (root.is_dir() and project.is_file()
            and 'name = "gpu-goodput-exporter"' in project.read_text(encoding="utf-8")):
        return {}
    return {p.name: p for p in sorted(root.glob("*.md")) if p.is_file()}


def add_routes(app: web.Application, root: Path = DOCS) -> list[str]:
    """Serve ``/docs/`` (the list) and ``/docs/<name>.md``; returns the names served."""
    pages = available(root)
    if not pages:
        return []
    index = "".join(f"/docs/{name}\n" for name in pages)

    async def list_all(_: web.Request) -> web.Response:
        return web.Response(text=index, headers=_HEADERS)

    async def one(request: web.Request) -> web.Response:
        path = pages.get(request.match_info["name"])
        if path is None:
            return web.Response(status=404, text="no such document; the list is at /docs/\n",
                                headers=_HEADERS)
        return web.Response(text=path.read_text(encoding="utf-8"), headers=_HEADERS)

    app.router.add_get("/docs/", list_all)
    app.router.add_get("/docs/{name}", one)
    return list(pages)
