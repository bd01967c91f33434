"""Only printable text reaches a terminal.

Label values come from outside (a job id, a pod name, a model, an exporter read over plain
HTTP), and a terminal obeys what it is sent: an OSC sequence retitles the window or writes
the clipboard (OSC 52), CSI clears the screen. :func:`printable` shows every C0 and C1
control character, DEL, and every other non-printing character (bidi overrides, line
separators) escaped, as Python spells it, so an escape sequence arrives as the text
``\\x1b]52;c;...``. ``top`` passes every string it prints through it, in curses and
``--once``.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile(r"[^ -~]")
"""Anything but printable ASCII: looked at one by one (most text never matches)."""


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char.isprintable():  # printable non-ASCII (accents, CJK) stays as it is
        return char
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: str) -> str:
    """``text`` with every non-printing character shown escaped."""
    return _UNSAFE.sub(_escape, text)
