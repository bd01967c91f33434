"""Container health check without curl: ``python -m exporter.web.healthcheck [URL]``.

Exit 0 when URL (default ``$GOODPUT_HEALTHCHECK_URL`` or http://127.0.0.1:9433/healthz)
answers 200 within 3 s, else 1 with one line on stderr. HTTPS is checked without
certificate verification: this is the container asking itself on loopback, and the
certificate names the Service, not 127.0.0.1.
"""

from __future__ import annotations

import os
import ssl
import sys
import urllib.error
import urllib.request

# The daemon's default port (exporter.settings.core.DEFAULT_PORT), written out so that a check
# every 30 s does not import pydantic; a test keeps the two equal.
DEFAULT_URL = "http://127.0.0.1:9433/healthz"


MAX_URL_CHARS = 2048
"""As for any URL the exporter takes (exporter.urls.MAX_URL_CHARS)."""


def check(url: str, timeout: float = 3.0) -> str | None:
    """None when healthy, else a short reason."""
    if len(url) > MAX_URL_CHARS:
        return f"the URL {url[:64]!r}... is longer than {MAX_URL_CHARS} characters"
    ctx = None
    if url.startswith("https://"):
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=ctx) as resp:
            status = int(resp.status)
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (OSError, ValueError) as exc:
        return f"{url}: {exc}"
    return None if status == 200 else f"{url}: HTTP {status}"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    url = args[0] if args else os.environ.get("GOODPUT_HEALTHCHECK_URL", DEFAULT_URL)
    problem = check(url)
    if problem:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
