"""The one error every stage of the serving pipeline raises: its own module, so the parser
(exposition.py) and the HTTP client (fetch.py) both use it and neither depends on the
other."""

from __future__ import annotations


class ScrapeError(Exception):
    """A scrape failed; ``reason`` is a short snake_case code for metrics and logs."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
