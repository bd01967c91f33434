"""``make llama-server`` (run by ``make test`` before pytest): build the real llama-server
the serving tests use, once, printing each step and build percentage, or say in one line
that it is cached or why it is skipped. Without it the build ran silently inside pytest for
minutes, and the first ``make test`` looked hung. Every step says how far it is at least
every 20 s: the sdist's bytes and percent, the build's percent and the file it is on."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.support.llamacpp import (
    DONE,
    VERSION,
    build_jobs,
    build_root,
    compiler_cache,
    missing_toolchain,
    server_binary,
)


def main() -> int:
    """``make test``'s visible step: build llama-server once, or say it is cached/skipped."""
    started = time.monotonic()

    def say(text: str) -> None:
        print(f"llama-server: {text}", flush=True)

    root = build_root()
    if (root / DONE).exists() and (root / "build" / "bin" / "llama-server").exists():
        say(f"cached at {root / 'build' / 'bin' / 'llama-server'}")
        return 0
    why = missing_toolchain()
    if why:
        say(f"not built ({why}): the real llama-server tests will be skipped")
        return 0
    cache = compiler_cache() or "no ccache (apt-get install ccache makes rebuilds seconds)"
    say(f"building llama.cpp {VERSION}'s llama-server target for the serving tests, once "
        f"(minutes on two cores, more when they are busy; {build_jobs()} jobs, {cache}; log "
        f"{root / 'build.log'}, cache {root})")
    try:
        binary = server_binary(progress=say)
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        say(f"build failed ({exc}); pytest reports the tests that need it")
        return 0
    say(f"built {binary} in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
