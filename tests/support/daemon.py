"""Run the real daemon (``python -m exporter``) as a subprocess on loopback.

The helper lives in ``testkit/harness.py`` so the bench scripts and the tests start the
daemon the same way; this module only re-exports it.
"""

from __future__ import annotations

from testkit.harness import REPO, DaemonProcess, DaemonStartError, daemon

__all__ = ["REPO", "DaemonProcess", "DaemonStartError", "daemon"]
