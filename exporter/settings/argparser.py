"""The argument parser every command uses (the daemon's and ``top``'s): a usage error in one
line naming the flag, with a "did you mean" for a misspelt one. Below both commands, so
neither imports the other for it."""

from __future__ import annotations

import argparse
import difflib
import re
from typing import NoReturn

EXIT_USAGE = 2
MAX_ECHO_CHARS = 64
"""Characters of a refused flag value (or unknown argument) the error line repeats."""
MAX_MESSAGE_CHARS = 400
"""The whole usage error is at most this long, whatever was typed."""
QUOTED = re.compile(r"'((?:[^'\\]|\\.){" + str(MAX_ECHO_CHARS + 1) + r",})'")


def capped(message: str) -> str:
    """``message`` with every quoted value cut to :data:`MAX_ECHO_CHARS` characters (and
    how many there were), every long word likewise, and the whole at
    :data:`MAX_MESSAGE_CHARS`: a 100 KB flag value is refused in one short line."""
    message = QUOTED.sub(
        lambda m: f"'{m.group(1)[:MAX_ECHO_CHARS]}...' ({len(m.group(1))} characters)", message
    )
    words = [
        f"{w[:MAX_ECHO_CHARS]}...({len(w)} characters)" if len(w) > MAX_ECHO_CHARS * 2 else w
        for w in message.split(" ")
    ]
    message = " ".join(words)
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS] + "..."
    return message


class Parser(argparse.ArgumentParser):
    """A usage error in one line naming the flag; the usage block is one --help away."""

    def error(self, message: str) -> NoReturn:
        hint = capped(self.did_you_mean(message))
        self.exit(EXIT_USAGE, f"{self.prog}: {capped(message)}{hint} (see --help)\n")

    def did_you_mean(self, message: str) -> str:
        """``; did you mean --interval?`` for a misspelt flag, as the environment gets."""
        if not message.startswith("unrecognized arguments:"):
            return ""
        words = message.partition(":")[2].split()
        known = [o for o in self._option_string_actions if o.startswith("--")]
        hints = []
        for flag in (w.split("=", 1)[0] for w in words if w.startswith("--")):
            close = difflib.get_close_matches(flag, known, n=1, cutoff=0.75)
            if close:
                hints.append(f"{flag}: did you mean {close[0]}?")
        return "; " + "; ".join(hints) if hints else ""
