"""``gpu-goodput-exporter top``: a live terminal view of one node, one row per GPU.

Built on the standard library's curses: it ships with every CPython on Linux, so ``top``
costs the daemon no dependency and no memory (it is only imported by this command), works
over ssh in any terminal that has a terminfo entry, and needs no colour. The frame itself is
plain text from :mod:`exporter.view.table`, so ``--once`` prints exactly what the screen
shows. docs/top.md says why curses rather than a richer library.
"""

from __future__ import annotations

import argparse
import contextlib
import curses
import queue
import shutil
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from exporter.view.printable import printable
from exporter.view.rows import SORTS, GpuRow, NodeView, Rates, arrange, parse
from exporter.view.source import AppFactory, Endpoint, SimulatedNode
from exporter.view.table import DETAIL_LINES, frame

DEFAULT_URL = "http://127.0.0.1:9433/metrics"
SETTLE_SECONDS = 10.0
"""--once waits at most this long for every GPU to have a verdict (a daemon just started
says unknown for its first windows)."""
ONCE_DEADLINE = 30.0
"""--once gives up after this long overall (``--deadline``): the settling wait, the wait
for a just-started job's first verdict, the reads (each at most ``source.READ_DEADLINE``),
parsing them and drawing the frame."""
VERDICT_SECONDS = 15.0
"""A multi-GPU job is judged once a GPU of it has been in it this long: the model names a
straggler after ``straggler_confirm_seconds`` (10) of windows of
``straggler_window_seconds`` (3) (exporter/model/config.py's defaults), plus a poll. Until
then --once waits, so right after start it shows the straggler instead of none."""
HELP = "s sort  r reverse  / filter  j/k select  q/Esc quit"
T = TypeVar("T")


def parser() -> argparse.ArgumentParser:
    from exporter.settings.argparser import Parser

    p = Parser(
        prog="gpu-goodput-exporter top",
        description="Live view of one node's GPUs: regime and why, SM/tensor/DRAM/bus bars, "
        "power, tokens/s, job and stragglers. Reads a running exporter's /metrics.",
    )
    add = p.add_argument
    add("--url", default=DEFAULT_URL,
        help=f"the exporter's /metrics (default {DEFAULT_URL}); user:password@ in the URL "
        "for basic auth")
    add("--simulate", action="store_true",
        help="run the built-in simulated node in this process and show it")
    add("--simulate-gpus", type=int, default=12, metavar="N", help="GPUs on the simulated node")
    add("--interval", type=float, default=1.0, metavar="SECONDS", help="refresh interval")
    add("--sort", choices=list(SORTS), default="gpu", help="sort key (key s cycles)")
    add("--reverse", action="store_true", help="reverse the sort (key r)")
    add("--filter", default="", metavar="WORDS",
        help="show rows containing every word, e.g. 'hollow' or 'comm_wait' (key /)")
    add("--once", action="store_true",
        help="print one frame and exit: once rates, every GPU's regime and every job's first "
        "straggler verdict are known (at most --deadline)")
    add("--width", type=int, default=0, help="--once: line width (default: the terminal's)")
    add("--deadline", type=float, default=ONCE_DEADLINE, metavar="SECONDS",
        help=f"--once: give up after this long overall (default {ONCE_DEADLINE:.0f})")
    add("--ca-file", metavar="FILE", help="CA bundle for an https URL")
    add("--insecure", action="store_true", help="do not verify the https certificate")
    return p


@dataclass
class State:
    """What the person chose; the rest comes from the exporter every interval."""

    sort: str = "gpu"
    reverse: bool = False
    filter: str = ""
    selected: int = 0
    typing: str | None = None
    """The filter being typed after ``/``; None when not typing."""
    view: NodeView = field(default_factory=NodeView)

    def rows(self) -> list[GpuRow]:
        return arrange(self.view.rows, self.sort, self.filter, self.reverse)

    def key(self, ch: int) -> bool:
        """Apply one key press; False to quit."""
        if self.typing is not None:
            return self._typing(ch)
        char = chr(ch) if 0 <= ch < 256 else ""
        if char in ("q", "Q", "\x1b"):
            return False
        if char == "s":
            keys = list(SORTS)
            self.sort = keys[(keys.index(self.sort) + 1) % len(keys)]
        elif char == "r":
            self.reverse = not self.reverse
        elif char == "/":
            self.typing = self.filter
        elif char in ("j",) or ch == curses.KEY_DOWN:
            self.selected += 1
        elif char in ("k",) or ch == curses.KEY_UP:
            self.selected -= 1
        self.selected = min(max(self.selected, 0), max(len(self.rows()) - 1, 0))
        return True

    def _typing(self, ch: int) -> bool:
        assert self.typing is not None
        if ch in (10, 13, curses.KEY_ENTER):
            self.filter, self.typing, self.selected = self.typing, None, 0
        elif ch == 27:
            self.typing = None
        elif ch in (8, 127, curses.KEY_BACKSPACE):
            self.typing = self.typing[:-1]
        elif 32 <= ch < 127:
            self.typing += chr(ch)
        return True

    def footer(self) -> str:
        if self.typing is not None:
            return f"filter: {self.typing}_  (Enter apply, Esc cancel)"
        order = f"{self.sort}{' reversed' if self.reverse else ''}"
        shown = f"  filter: {self.filter}" if self.filter else ""
        return f"sort: {order}{shown}   {HELP}"


def read(endpoint: Endpoint, rates: Rates, until: float | None = None) -> NodeView:
    """The node as the exporter says now, or an empty view that says why not (one line of
    printable text: a parser's or HTTP client's message can quote the server's bytes).
    With ``until`` (a ``time.monotonic()`` deadline) parsing is bounded too."""
    try:
        text = endpoint.read(until)
        if until is None:
            return parse(text, rates)
        return bounded(lambda: parse(text, rates), until, "parse the answer")
    except (OSError, ValueError) as exc:
        return NodeView(error=printable(" ".join(str(exc).split())))


def bounded(work: Callable[[], T], until: float, what: str) -> T:
    """``work()`` on a daemon thread, given up at ``until`` (``OSError``): parsing a large
    exposition is pure Python, so only leaving it behind bounds it. ``--once`` exits right
    after, which ends the thread."""
    box: queue.SimpleQueue[tuple[bool, object]] = queue.SimpleQueue()

    def run() -> None:
        try:
            box.put((True, work()))
        except Exception as exc:  # handed back, raised on the caller's thread
            box.put((False, exc))

    threading.Thread(target=run, name="top-work", daemon=True).start()
    try:
        ok, value = box.get(timeout=max(until - time.monotonic(), 0.0))
    except queue.Empty:
        raise OSError(f"out of time: could not {what} by the deadline") from None
    if not ok:
        if isinstance(value, (OSError, ValueError)):
            raise value
        raise ValueError(f"{type(value).__name__}: {value}")
    return value  # type: ignore[return-value]


def warn(message: str) -> None:
    """One line on standard error, printable text only."""
    print(printable(" ".join(message.split())), file=sys.stderr)


def screen_lines(state: State, width: int, height: int) -> list[str]:
    """The whole screen: frame rows scrolled to keep the selected GPU in view, then help."""
    rows = state.rows()
    room = max(height - 3 - DETAIL_LINES - (1 if state.view.error else 0)
               - len(state.view.jobs), 1)
    top = min(max(state.selected - room + 1, 0), max(len(rows) - room, 0))
    title = (f"gpu-goodput-exporter top  node {state.view.node or '?'}  "
             f"{len(rows)}/{len(state.view.rows)} GPUs  {time.strftime('%H:%M:%S')}")
    lines = frame(state.view, rows[top:top + room], width, title,
                  selected=state.selected - top if rows else None)
    return [*lines, state.footer()]


def paint(screen: curses.window, state: State) -> None:
    height, width = screen.getmaxyx()
    screen.erase()
    for y, text in enumerate(screen_lines(state, width - 1, height)[:height]):
        try:
            screen.addnstr(y, 0, printable(text), width - 1)
        except curses.error:  # a terminal shrunk mid-paint
            break
    screen.refresh()


def live(screen: curses.window, endpoint: Endpoint, state: State, interval: float) -> None:
    with contextlib.suppress(curses.error):  # a terminal that cannot hide the cursor
        curses.curs_set(0)
    screen.timeout(100)
    rates, due = Rates(min_seconds=min(interval, 1.0) * 0.9), 0.0
    if not read(endpoint, rates).error:  # the first frame shows rates: two reads apart
        time.sleep(rates.min_seconds)
    while True:
        if time.monotonic() >= due:
            state.view = read(endpoint, rates)
            state.selected = min(state.selected, max(len(state.rows()) - 1, 0))
            due = time.monotonic() + interval
            paint(screen, state)
        ch = screen.getch()
        if ch == -1:
            continue
        if ch == curses.KEY_RESIZE:
            paint(screen, state)
            continue
        if not state.key(ch):
            return
        paint(screen, state)


FRAME_RESERVE = 1.0
"""Seconds of --once's deadline kept for drawing the frame (a tenth of a short deadline):
a read that ends at the deadline must not leave a good view unprinted. 1,200 GPUs draw in
about 0.02 s."""
ONCE_RATE_SECONDS = 6.0
"""--once takes its rates over at least this long: the clock-event counter moves in ~5 s
steps, so a shorter window can miss a throttled GPU's step."""


def once(endpoint: Endpoint, state: State, interval: float, width: int,
         deadline: float = ONCE_DEADLINE) -> int:
    """Print one frame after reads ONCE_RATE_SECONDS apart (so rates are known) and, within
    SETTLE_SECONDS, once every GPU has a regime, and once every multi-GPU job has its first
    straggler verdict (:func:`judged`); whatever happens, within ``deadline``
    seconds (a server that trickles its answer is given up, in one line). A daemon that
    cannot be read is one line on standard error, not a frame around it."""
    until = time.monotonic() + deadline
    reads_until = until - min(FRAME_RESERVE, deadline / 10)  # the rest draws the frame
    rates = Rates(min_seconds=0.0)
    state.view = read(endpoint, rates, reads_until)
    start = time.monotonic()
    while not state.view.error and time.monotonic() + interval < reads_until:
        time.sleep(interval)
        view = read(endpoint, rates, reads_until)
        if view.error:  # a good frame is kept: only a first read that fails is the answer
            break
        state.view = view
        settled = all(r.regime not in ("", "unknown") for r in state.view.rows)
        now = time.monotonic()
        if ((settled and now - start >= ONCE_RATE_SECONDS) or now - start >= SETTLE_SECONDS) \
                and judged(state.view):
            break
    if state.view.error:
        warn(f"gpu-goodput-exporter top: cannot read {state.view.error}")
        return 1
    width = width or shutil.get_terminal_size((80, 24)).columns
    view = state.view
    try:  # the deadline covers the frame too: thousands of rows are drawn in pure Python
        text = bounded(lambda: "\n".join(printable(line.rstrip())
                                         for line in frame(view, state.rows(), width)),
                       until, "draw the frame")
    except (OSError, ValueError) as exc:
        warn(f"gpu-goodput-exporter top: {exc}")
        return 1
    print(text)
    return 0


def judged(view: NodeView) -> bool:
    """Whether every multi-GPU job has its first verdict: a straggler named, or watched
    for VERDICT_SECONDS without one."""
    return all(job.straggler or job.seconds >= VERDICT_SECONDS for job in view.jobs)


def quiet_logs() -> None:
    """The terminal belongs to the view: an in-process daemon's log lines would tear it."""
    import structlog

    structlog.configure(processors=[], logger_factory=structlog.ReturnLoggerFactory())


def main(argv: Sequence[str] | None = None,
         simulated_app: AppFactory | None = None) -> int:
    """``top``; ``simulated_app`` builds the daemon ``--simulate`` serves (the CLI passes it)."""
    args = parser().parse_args(argv)
    state = State(sort=args.sort, reverse=args.reverse, filter=args.filter)
    node = None
    url = args.url
    if args.simulate:
        if simulated_app is None:
            warn("gpu-goodput-exporter top: --simulate needs the daemon (run it through the "
                 "gpu-goodput-exporter command)")
            return 2
        quiet_logs()
        node = SimulatedNode(simulated_app, args.simulate_gpus)
        try:
            url = node.start()
        except OSError as exc:
            warn(f"gpu-goodput-exporter top: {exc}")
            return 2
    endpoint = Endpoint(url, ca_file=args.ca_file, insecure=args.insecure)
    try:
        if args.once or not sys.stdout.isatty():
            return once(endpoint, state, args.interval, args.width, args.deadline)
        curses.wrapper(live, endpoint, state, max(args.interval, 0.2))
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        if node is not None:
            node.stop()
