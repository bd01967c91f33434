"""The argument parser every command uses (the daemon's and ``top``'s): a usage error in one
line naming the flag, with a "did you mean" for a misspelt one. Below both commands, so
neither imports the other for it."""

from __future__ import annotations

import argparse
import difflib
from typing import NoReturn

EXIT_USAGE = 2


class Parser(argparse.ArgumentParser):
    """A usage error in one line naming the flag; the usage block is one --help away."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message}{self.did_you_mean(message)} "
                              "(see --help)\n")

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
