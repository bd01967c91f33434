"""Parsing a scraped body into families keyed by their ``# TYPE`` name.

A serving engine's body is mostly families no alias table reads (histogram buckets,
``_created`` gauges, process and Python families), and prometheus-client's text parser
costs about a kilobyte and several microseconds per sample. :func:`scan` therefore walks
the body once, line by line, keeping only the lines of families that some table could
read and noting which families exist (for engine detection); :meth:`Scan.parse` then hands
just the detected engine's families to prometheus-client. Memory per body is the text
plus the kept lines, whatever else the engine sends.

The walk follows the parser's own grouping rules (a ``# HELP``/``# TYPE`` line opens a
family; a sample whose name the open family does not allow is a one-sample untyped
family), so a kept family parses exactly as it would in the whole body. A line the walk
does not recognise sends the body to the whole-body parser, which gives the error (or the
result) it always gave.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Iterable, Iterator, Set
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample as PromSample

from exporter.sources.serving.errors import ScrapeError


class ExpositionError(ValueError):
    """The body is not Prometheus text; the message says where it broke."""


@dataclass(frozen=True)
class Family:
    name: str
    type: str
    samples: tuple[PromSample, ...]


def parse(text: str) -> dict[str, Family]:
    """Families by name. Counters are keyed without ``_total`` whatever the engine wrote
    (prometheus-client strips it, and adds it to suffix-less TGI/Triton samples); a
    ``_created`` series the parser could not tie to its counter becomes its own family
    and is simply never looked up."""
    return _merge(_parsed(text))


def _parsed(text: str) -> Iterator[Family]:
    try:
        for metric in text_string_to_metric_families(text):
            yield Family(metric.name, metric.type, tuple(metric.samples))
    except Exception as exc:  # the parser raises ValueError, IndexError, ... on bad bytes
        raise ExpositionError(f"not Prometheus text: {_short(exc)}") from exc


def _merge(families: Iterable[Family], into: dict[str, Family] | None = None) -> dict[str, Family]:
    out = {} if into is None else into
    for family in families:
        old = out.get(family.name)
        if old is not None and old.type != family.type:
            # One family in two places with two types: the format allows neither, and
            # no reading of it is right (prometheus-client would retype the first part).
            raise ExpositionError(
                f"not Prometheus text: family {_short(ValueError(family.name), 60)} "
                f"appears as {old.type} and as {family.type}"
            )
        samples = family.samples if old is None else old.samples + family.samples
        out[family.name] = Family(family.name, family.type, samples)
    return out


def _short(exc: Exception, limit: int = 120) -> str:
    text = str(exc).replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- scanning: which families are there, and the lines of those worth parsing -------------

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_VALUE = r"[-+]?(?:[0-9.][0-9.eE+-]*|(?i:nan|inf|infinity))"
_TIMESTAMP = r"[-+]?[0-9.][0-9.eE+-]*"
_SAMPLE = re.compile(
    rf"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{{(.*)\}})?[ \t]+({_VALUE})(?:[ \t]+({_TIMESTAMP}))?"
)
"""A sample line as the text format has it: name, labels, value, optional timestamp."""
_QUOTED = r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"'
"""A quoted label value (the loop unrolled: one character-class run per stretch)."""
_LABEL = rf"[a-zA-Z_:][a-zA-Z0-9_:]*[ \t]*=[ \t]*{_QUOTED}"
_LABELS = re.compile(rf"[ \t]*(?:{_LABEL}[ \t]*,[ \t]*)*(?:{_LABEL}[ \t]*)?")
_PAIR = re.compile(r'([a-zA-Z_:][a-zA-Z0-9_:]*)[ \t]*=[ \t]*"([^"\\\n]*(?:\\.[^"\\\n]*)*)"')
_ESCAPE = re.compile(r'\\[\\n"]')
_UNESCAPE = {"\\\\": "\\", "\\n": "\n", '\\"': '"'}

_ALLOWED = {
    "summary": ("_count", "_sum", ""),
    "histogram": ("_count", "_sum", "_bucket"),
}
"""Sample name suffixes a family of each type owns (as prometheus-client's parser has it);
every other type owns only its own name."""
_TYPES = frozenset(
    {"counter", "gauge", "summary", "histogram", "gaugehistogram", "unknown", "info",
     "stateset", "untyped"}
)  # fmt: skip


MAX_SAMPLES = 30_000
"""Kept sample lines per body (buckets are never kept). The 8 MiB vLLM body of
bench/serving/serving_body.py (256 model x rank pairs) keeps 4,890, so a body hits this only past
about 50 MB of that shape or with far more series of the read families; each costs
under a kilobyte once parsed, so this bounds a hostile body (one family with a model
name per line) to about 25 MiB over its text, within the chart's 128 Mi. Past it the
scrape fails (``body_too_large``): a partial reading would look like counters going down."""


class _Unusual(Exception):
    """Text the fast path does not follow (quoted names, exemplars, broken text): the
    whole-body parser decides."""


@functools.lru_cache(maxsize=256)
def _owners(allowed: tuple[str, ...]) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """(a segment's first line belongs to ``allowed`` or is blank, a later line does not):
    name checks only, at C speed, so the lines of a family nobody reads are never split."""
    names = "|".join(re.escape(a) for a in sorted(allowed, key=len, reverse=True))
    owned = rf"[ \t]*(?:(?:{names})[{{ \t]|\r?(?:\n|$))"
    return re.compile(owned), re.compile(rf"\n(?!{owned})")


@dataclass
class _Chunk:
    name: str
    """The family's name ("" for a run of one-sample families)."""
    raw: str = ""
    """Its name as the HELP/TYPE line gave it (a counter's may end in ``_total``)."""
    kind: str = "untyped"
    lines: list[str] = field(default_factory=list)


@dataclass
class Scan:
    """What :func:`scan` found: the families present and the kept families' lines."""

    present: set[str] = field(default_factory=set)
    """Names of families present that are in the scan's ``keep`` set."""
    prefixes: set[str] = field(default_factory=set)
    """Which of the scan's ``prefixes`` some family name starts with."""
    count: int = 0
    """Families seen (a family split in several places counts each time)."""
    chunks: list[_Chunk] = field(default_factory=list)
    """Kept families in body order."""
    whole: dict[str, Family] | None = None
    """Set instead of ``chunks`` when the body went to the whole-body parser."""

    @property
    def kept_lines(self) -> int:
        return sum(len(c.lines) for c in self.chunks)

    def parse(self, wanted: Set[str]) -> dict[str, Family]:
        """The families named in ``wanted``, exactly as :func:`parse` would give them."""
        if self.whole is not None:
            return {name: f for name, f in self.whole.items() if name in wanted}
        out: dict[str, Family] = {}
        for chunk in self.chunks:
            if chunk.name and chunk.name not in wanted:
                continue
            try:
                families = _fast(chunk)
            except _Unusual:
                families = list(_parsed("\n".join(chunk.lines) + "\n"))
            _merge((f for f in families if f.name in wanted), out)
        return out

    def saw(self, name: str, keep: Set[str], prefixes: tuple[str, ...]) -> None:
        self.count += 1
        if name in keep:
            self.present.add(name)
        if name.startswith(prefixes):
            self.prefixes.update(p for p in prefixes if name.startswith(p))


def scan(text: str, keep: Set[str], prefixes: tuple[str, ...] = ()) -> Scan:
    """Walk ``text`` once; keep the lines of families named in ``keep`` (histogram
    buckets excepted: no table reads them). Raises :class:`ExpositionError` for a body
    that is not Prometheus text."""
    try:
        return _Walk(keep, prefixes).run(text)
    except _Unusual:
        return _whole(text, keep, prefixes)


def _whole(text: str, keep: Set[str], prefixes: tuple[str, ...]) -> Scan:
    """The parser's own reading of the body, streamed: only kept families are stored."""
    found = Scan(whole={})
    assert found.whole is not None
    for family in _parsed(text):
        found.saw(family.name, keep, prefixes)
        if family.name in keep:
            _merge([family], found.whole)
    return found


class _Walk:
    """prometheus-client's grouping rules, applied without parsing samples: a HELP or TYPE
    line opens a family; a sample the open family does not own is a family of its own,
    after which none is open."""

    def __init__(self, keep: Set[str], prefixes: tuple[str, ...]) -> None:
        self.keep = keep
        self.samples = 0  # kept lines so far
        self.sorted_keep = sorted(keep)
        self.near = False  # some kept name starts with the open family's name
        self.prefixes = prefixes
        self.found = Scan()
        self.name = ""
        self.kind = "untyped"
        self.allowed: tuple[str, ...] = ()
        self.lines: list[str] | None = None  # the open family's lines, when it may be kept
        self.typed = False  # the open family had a TYPE line
        self.sampled = False  # the open family owns a sample already
        self.singles: list[str] | None = None  # a run of kept one-sample families

    def run(self, text: str) -> Scan:
        end = len(text)
        pos = 0
        while pos < end:
            if text.startswith("#", pos):
                stop = text.find("\n", pos)
                stop = end if stop < 0 else stop
                self.line(text[pos:stop].strip())
                pos = stop + 1
                continue
            # Samples up to the next comment line: one regex pass when they all belong
            # to a family nobody reads; line by line otherwise.
            stop = text.find("\n#", pos)
            stop = end if stop < 0 else stop + 1
            if self.name and self._owns(text, pos, stop):
                self.sampled = self.sampled or not text[pos:stop].isspace()
                if self.lines is not None:
                    lines = (x.strip() for x in text[pos:stop].split("\n"))
                    bucket = self.bucket()
                    new = [x for x in lines if x and not (bucket and x.startswith(bucket))]
                    self.lines += new
                    self.kept(len(new))
            else:
                for line in _lines(text, pos, stop):
                    line = line.strip()
                    if line:
                        self.line(line)
            pos = stop
        self.close()
        return self.found

    def _owns(self, text: str, pos: int, stop: int) -> bool:
        """Whether every line in ``text[pos:stop]`` is a sample of the open family (or
        blank). Lines of families nobody reads are not checked further: a broken label or
        value there costs nothing."""
        last = stop - 1 if text.endswith("\n", pos, stop) else stop
        if self.lines is None and not self.near:
            # Nothing kept is named like this family: lines that merely start with its
            # name are enough (a stray sample among them would be a family of its own,
            # but one nobody reads), and two counts need no regex per family.
            return text.count("\n" + self.name, pos - 1, last) == text.count("\n", pos - 1, last)
        first, foreign = _owners(self.allowed)
        return bool(first.match(text, pos, last)) and foreign.search(text, pos, last) is None

    def bucket(self) -> str:
        """The open family's bucket sample name when it is a histogram: no table reads
        buckets, so they are neither kept nor counted."""
        return self.name + "_bucket" if self.kind == "histogram" else ""

    def kept(self, lines: int) -> None:
        self.samples += lines
        if self.samples > MAX_SAMPLES:
            raise ScrapeError(
                "body_too_large",
                f"more than {MAX_SAMPLES} samples of the families engine tables read; "
                "stopped",
            )

    def close(self) -> None:
        if not self.name:
            return
        name, kind = self.name, self.kind
        final = name[:-6] if kind == "counter" and name.endswith("_total") else name
        self.found.saw(final, self.keep, self.prefixes)
        if self.lines is not None and final in self.keep:
            lines = self.lines
            if kind == "histogram":
                bucket = name + "_bucket"
                lines = [x for x in lines if not x.startswith(bucket)]
            self.found.chunks.append(_Chunk(final, name, kind, lines))
            self.singles = None
        self.name, self.kind, self.allowed, self.lines = "", "untyped", (), None

    def line(self, line: str) -> None:
        if line[0] == "#":
            self.comment(line)
            return
        match = _SAMPLE.fullmatch(line)
        if match is None:
            raise _Unusual
        sample, inside = match.group(1, 2)
        if inside and not _LABELS.fullmatch(inside):
            raise _Unusual
        if sample in self.allowed:
            self.sampled = True
            bucket = self.bucket()
            if self.lines is not None and not (bucket and sample == bucket):
                self.lines.append(line)
                self.kept(1)
            return
        self.close()
        self.found.saw(sample, self.keep, self.prefixes)
        if sample in self.keep:
            if self.singles is None:
                self.singles = []
                self.found.chunks.append(_Chunk("", lines=self.singles))
            self.singles.append(line)
            self.kept(1)

    def comment(self, line: str) -> None:
        parts = line.split(None, 3)
        if len(parts) < 2 or parts[1] not in ("HELP", "TYPE"):
            return
        if len(parts) == 2 or not _NAME.fullmatch(parts[2]):
            raise _Unusual  # quoted or invalid names: the parser decides
        candidate = parts[2]
        if parts[1] == "HELP":
            if candidate != self.name:
                self.close()
                self.open(candidate)
        else:
            if len(parts) < 4 or parts[3] not in _TYPES:
                raise _Unusual
            if candidate != self.name:
                self.close()
                self.open(candidate)
            elif self.typed or self.sampled:
                # A family typed twice, or typed after its samples: the format forbids it,
                # and prometheus-client retypes the samples already read; it decides.
                raise _Unusual
            self.kind = parts[3]
            self.typed = True
            self.allowed = tuple(candidate + s for s in _ALLOWED.get(self.kind, ("",)))
        if self.lines is not None:
            self.lines.append(line)

    def open(self, name: str) -> None:
        self.name, self.kind, self.allowed = name, "untyped", (name,)
        self.typed = self.sampled = False
        might = name in self.keep or name.removesuffix("_total") in self.keep
        self.lines = [] if might else None
        at = bisect.bisect_left(self.sorted_keep, name)
        self.near = at < len(self.sorted_keep) and self.sorted_keep[at].startswith(name)


def _lines(text: str, pos: int, stop: int) -> Iterator[str]:
    """The lines of ``text[pos:stop]`` one at a time (a list of them all would cost
    several times the text when every line is a family of its own)."""
    while pos < stop:
        end = text.find("\n", pos, stop)
        end = stop if end < 0 else end
        yield text[pos:end]
        pos = end + 1


def _fast(chunk: _Chunk) -> list[Family]:
    """A kept chunk's families without prometheus-client's per-character walk (about 35
    µs a labelled sample); gives up (:class:`_Unusual`) on anything it does not follow."""
    names: dict[str, str] = {}  # one copy of each metric and label name per chunk
    if not chunk.name:
        return [Family(s.name, "unknown", (s,)) for s in (_sample(x, names) for x in chunk.lines)]
    kind = "unknown" if chunk.kind == "untyped" else chunk.kind
    samples = [_sample(x, names) for x in chunk.lines if x[0] != "#"]
    if kind == "counter" and not chunk.raw.endswith("_total"):
        samples = [s._replace(name=s.name + "_total") for s in samples]
    return [Family(chunk.name, kind, tuple(samples))]


def _sample(line: str, names: dict[str, str]) -> PromSample:
    match = _SAMPLE.fullmatch(line)
    if match is None:
        raise _Unusual
    name, inside, value, stamp = match.groups()
    name = names.setdefault(name, name)
    labels: dict[str, str] = {}
    if inside:
        if not _LABELS.fullmatch(inside):
            raise _Unusual
        for key, raw in _PAIR.findall(inside):
            key = names.setdefault(key, key)
            labels[key] = _ESCAPE.sub(lambda m: _UNESCAPE[m.group()], raw) if "\\" in raw else raw
    try:
        number = _number(value)
        when = _number(stamp) / 1000 if stamp else None
    except ValueError as exc:
        raise _Unusual from exc
    return PromSample(name, labels, number, when)


def _number(text: str) -> float:
    """prometheus-client's value: an int when it is one, else a float (asked in that
    order without a failed ``int()``: an exception per sample costs microseconds)."""
    return int(text) if text.lstrip("+-").isdigit() else float(text)
