"""Parsing only what the engine tables read (issue 22 item 5).

``exposition.scan`` walks a body once and keeps the lines of families some table reads;
``Scan.parse`` parses those. Whatever the body, the families it returns must be the ones
prometheus-client's whole-body parse gives (histogram buckets aside: no table reads them),
so every engine reading stays the same; and a body of families nobody reads must cost
little memory however big it is.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.serving.serving_body import vllm_body
from exporter.sources.serving.adapter import (
    PREFIXES,
    READS,
    Reading,
    UnknownEngine,
    detect,
    read,
    read_body,
)
from exporter.sources.serving.engines import TABLES
from exporter.sources.serving.errors import ScrapeError
from exporter.sources.serving.exposition import (
    MAX_SAMPLES,
    ExpositionError,
    Family,
    parse,
    scan,
)
from testkit.harness import REPO

HERE = Path(__file__).parent
FIXTURES = sorted((HERE / "fixtures").glob("*.txt"))
CAPTURES = sorted(
    p
    for p in (REPO / "tests" / "fixtures" / "serving-metrics").glob("*.txt")
    if "docs-design-metrics-PARTIAL" not in p.name  # a broken line: checked below
)


def _capture(path: Path) -> str:
    """A public capture without its README annotations (as test_shared_fixtures reads it)."""
    lines = path.read_text().splitlines()[1:]
    return "\n".join(x for x in lines if not x.startswith("$ ") and x != "...") + "\n"


def whole(text: str, engine: str = "", model: str = "") -> Reading:
    """The reading as it was before: every family parsed."""
    families = parse(text)
    return read(detect(families, engine), families, model)


def no_buckets(families: dict[str, Family]) -> dict[str, Family]:
    return {
        name: Family(
            f.name,
            f.type,
            tuple(s for s in f.samples if f.type != "histogram" or not s.name.endswith("_bucket")),
        )
        for name, f in families.items()
    }


def same_families(text: str, wanted: frozenset[str] = READS) -> None:
    expected = no_buckets({k: v for k, v in parse(text).items() if k in wanted})
    got = scan(text, READS, PREFIXES).parse(wanted)
    assert repr(got) == repr(expected)  # repr: NaN samples compare equal


@pytest.mark.parametrize(
    "path", [*FIXTURES, *CAPTURES], ids=lambda p: p.name
)
def test_every_fixture_gives_the_same_reading(path: Path) -> None:
    text = path.read_text() if path.parent.name == "fixtures" else _capture(path)
    assert read_body(text) == whole(text)
    same_families(text)


@pytest.mark.parametrize("table", TABLES, ids=lambda t: f"{t.engine}-{t.version}")
def test_the_filter_keeps_every_family_each_table_reads(table: object) -> None:
    from exporter.sources.serving.engines import EngineTable

    assert isinstance(table, EngineTable)
    assert table.reads() <= READS
    # Whatever is present, what a reading needs is among what the table reads.
    assert table.needs(READS) <= table.reads()


def test_a_vllm_body_reads_the_same_and_keeps_few_lines() -> None:
    text = vllm_body(4)
    found = scan(text, READS, PREFIXES)
    assert found.kept_lines < text.count("\n") / 10
    assert read_body(text) == whole(text)
    same_families(text)


def test_configured_engine_still_narrows_detection() -> None:
    text = (HERE / "fixtures" / "vllm_v1.txt").read_text()
    assert read_body(text, engine="vllm").engine == "vllm"
    with pytest.raises(UnknownEngine, match="engine 'tgi'"):
        read_body(text, engine="tgi")


GROUPING = {
    # a counter declared without _total: prometheus-client adds it to the samples
    "suffixless": "# TYPE tgi_request_success counter\ntgi_request_success 5\n"
    "# TYPE tgi_queue_size gauge\ntgi_queue_size 2\n",
    # a _created sample the counter does not own: a family of its own, then none is open,
    # so the next counter sample is a one-sample family named with its _total
    "created_breaks_block": "# TYPE vllm:generation_tokens_total counter\n"
    'vllm:generation_tokens_total{model_name="m"} 10\n'
    'vllm:generation_tokens_created{model_name="m"} 1.7e9\n'
    'vllm:generation_tokens_total{model_name="n"} 20\n'
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{model_name="m"} 1\n',
    # HELP only: untyped, owning only its own name
    "help_only": "# HELP vllm:num_requests_running running\n"
    'vllm:num_requests_running{model_name="m"} 3\n'
    "# TYPE vllm:generation_tokens_total counter\n"
    'vllm:generation_tokens_total{model_name="m"} 7\n',
    # no comments at all: every sample is its own family
    "untyped": 'vllm:num_requests_running{model_name="m"} 3\n'
    'vllm:generation_tokens_total{model_name="m"} 9\nnode_load1 0.5\n',
    # blank lines, other comments, CR LF line ends, indentation, escapes, timestamps
    "noise": "# a comment\n\n# TYPE vllm:generation_tokens_total counter\r\n"
    '  vllm:generation_tokens_total{model_name="a \\"b\\" \\\\ c\\nd"} 4 1700000000000\r\n'
    "\n# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{model_name="m",} 2\n'
    "   # TYPE vllm:num_requests_waiting gauge\n"
    'vllm:num_requests_waiting{model_name="m"} 1\n',
    # the same family in two places: merged, in body order
    "split_family": "# TYPE vllm:generation_tokens_total counter\n"
    'vllm:generation_tokens_total{model_name="a"} 1\n'
    "# TYPE other gauge\nother 1\n"
    "# TYPE vllm:generation_tokens_total counter\n"
    'vllm:generation_tokens_total{model_name="b"} 2\n',
    # summaries own their bare name, histograms keep _sum/_count and lose buckets
    "histogram": "# TYPE vllm:time_to_first_token_seconds histogram\n"
    'vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 1\n'
    'vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 2\n'
    'vllm:time_to_first_token_seconds_sum{model_name="m"} 0.3\n'
    'vllm:time_to_first_token_seconds_count{model_name="m"} 2\n'
    "# TYPE vllm:generation_tokens_total counter\n"
    'vllm:generation_tokens_total{model_name="m"} 1e3\n'
    'vllm:generation_tokens_total{model_name="n"} NaN\n'
    'vllm:generation_tokens_total{model_name="o"} +Inf\n',
    # names the fast path does not follow go to the whole-body parser
    "quoted_name": '# TYPE "vllm:num_requests_running" gauge\n'
    'vllm:num_requests_running{model_name="m"} 3\n'
    "# TYPE vllm:generation_tokens_total counter\n"
    'vllm:generation_tokens_total{model_name="m"} 7\n',
}


@pytest.mark.parametrize("name", sorted(GROUPING))
def test_grouping_follows_the_parser(name: str) -> None:
    text = GROUPING[name]
    same_families(text)
    assert read_body(text) == whole(text)


@pytest.mark.parametrize(
    "body",
    [
        # broken in a family a table reads: still a clean parse error
        '# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{m="a 1\n',
        '# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{m="a"} x\n',
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{a=\"b\"}} 1\n",
        # not sample-shaped at all, or a type nobody knows
        "hello world, not metrics at all {{{\n",
        "\x00\x01garbage{{{",
        "# TYPE vllm:num_requests_running sometimes\nvllm:num_requests_running 1\n",
    ],
)
def test_bad_text_in_read_families_is_still_a_parse_error(body: str) -> None:
    with pytest.raises(ExpositionError, match="not Prometheus text"):
        read_body(body)


def test_bad_labels_in_a_family_nobody_reads_are_not_parsed() -> None:
    text = (
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="16",...} 1\n'
        "# TYPE vllm:generation_tokens_total counter\n"
        'vllm:generation_tokens_total{model_name="m"} 5\n'
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{model_name="m"} 1\n'
    )
    with pytest.raises(ExpositionError):
        parse(text)
    assert read_body(text).values[("generation_tokens", "m", "")] == 5.0


@pytest.mark.parametrize(
    "body",
    [
        # the issue-37 flake: a histogram's bucket, then the family declared a counter
        "# TYPE vllm:generation_tokens histogram\n"
        'vllm:generation_tokens_bucket{model_name="a",le="1"} 1\n'
        "# TYPE vllm:generation_tokens_total counter\n"
        'vllm:generation_tokens_total{model_name="a"} 1\n',
        # one family in two places, typed two ways
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n"
        "# TYPE other gauge\nother 1\n"
        "# TYPE vllm:num_requests_running counter\nvllm:num_requests_running 2\n",
    ],
)
def test_a_family_typed_two_ways_is_a_parse_error_both_ways(body: str) -> None:
    with pytest.raises(ExpositionError, match="appears as"):
        parse(body)
    with pytest.raises(ExpositionError, match="appears as"):
        read_body(body)


def test_a_family_retyped_in_place_reads_as_the_parser_reads_it() -> None:
    """The parser retypes the samples it already read; the fast path defers to it."""
    text = (
        "# TYPE vllm:time_to_first_token_seconds histogram\n"
        'vllm:time_to_first_token_seconds_bucket{model_name="a",le="1"} 1\n'
        "# TYPE vllm:time_to_first_token_seconds counter\n"
        'vllm:time_to_first_token_seconds_total{model_name="a"} 1\n'
    )
    same_families(text)


# --- any body built from these lines reads the same both ways -----------------------------

NAMES = ("vllm:generation_tokens", "vllm:num_requests_running", "python_gc_objects",
         "vllm:time_to_first_token_seconds", "llamacpp:n_decode", "tgi_queue_size",
         "vllm:generation", "app_requests")  # fmt: skip
"""Kept families, families nobody reads, and one ("vllm:generation") that begins the name
of a kept one."""
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")
SUFFIXES = ("", "_total", "_sum", "_count", "_bucket", "_created")


@st.composite
def lines(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(NAMES))
    kind = draw(st.integers(0, 3))
    if kind == 0:
        suffix = draw(st.sampled_from(("", "_total")))
        return f"# TYPE {name}{suffix} {draw(st.sampled_from(TYPES))}"
    if kind == 1:
        return f"# HELP {name} some help"
    if kind == 2:
        return ""
    suffix = draw(st.sampled_from(SUFFIXES))
    model = draw(st.sampled_from(("a", "b")))
    le = ',le="1"' if suffix == "_bucket" else ""
    value = draw(st.sampled_from(("1", "2.5", "1e3", "NaN", "+Inf", "0")))
    return f'{name}{suffix}{{model_name="{model}"{le}}} {value}'


@settings(max_examples=500, deadline=None)
@given(st.lists(lines(), max_size=30))
def test_any_body_gives_the_whole_parse_families(body: list[str]) -> None:
    text = "\n".join(body) + "\n"
    try:
        expected = parse(text)
    except ExpositionError:
        return  # e.g. a histogram sample under a TYPE line the parser refuses
    wanted = READS
    got = scan(text, READS, PREFIXES).parse(wanted)
    assert repr(got) == repr(no_buckets({k: v for k, v in expected.items() if k in wanted}))
    try:
        before = whole(text)
    except UnknownEngine:
        with pytest.raises(UnknownEngine):
            read_body(text)
        return
    assert repr(read_body(text)) == repr(before)


# --- memory ------------------------------------------------------------------------------

def irrelevant_body(families: int = 1200) -> str:
    """About 8 MiB: histograms of an application nobody reads, then two vLLM families."""
    noise = "".join(
        f"# HELP app_family_{i} An irrelevant family.\n# TYPE app_family_{i} histogram\n"
        + "".join(
            f'app_family_{i}_bucket{{le="{b}",path="/api/v1/items/{j}"}} {j}\n'
            for j in range(40)
            for b in (0.1, 1, 10)
        )
        for i in range(families)
    )
    return (
        noise
        + "# TYPE vllm:generation_tokens_total counter\n"
        + 'vllm:generation_tokens_total{model_name="m"} 42\n'
        + "# TYPE vllm:num_requests_running gauge\n"
        + 'vllm:num_requests_running{model_name="m"} 1\n'
    )


def test_a_huge_body_of_irrelevant_families_costs_bounded_memory() -> None:
    text = irrelevant_body()
    assert len(text) > 7 * 1024 * 1024
    tracemalloc.start()
    try:
        reading = read_body(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert reading.values[("generation_tokens", "m", "")] == 42.0
    # Python allocations beyond the text itself: the whole-body parse of this text takes
    # about 110 MiB of RSS; the walk slices one family's lines at a time at most.
    assert peak < 4 * 1024 * 1024, peak


def test_a_body_of_distinct_untyped_names_costs_bounded_memory() -> None:
    """Every line its own family (no comments): the walk counts them, it keeps no names."""
    text = "".join(f"app_series_{i} {i}\n" for i in range(100_000))
    text += "# TYPE vllm:generation_tokens_total counter\n"
    text += 'vllm:generation_tokens_total{model_name="m"} 7\n'
    tracemalloc.start()
    try:
        reading = read_body(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert reading.values[("generation_tokens", "m", "")] == 7.0
    assert peak < len(text) + 2 * 1024 * 1024, peak  # one segment's lines, then nothing


def _models(n: int) -> str:
    return "# TYPE vllm:generation_tokens_total counter\n" + "".join(
        f'vllm:generation_tokens_total{{model_name="m{i}"}} {i}\n' for i in range(n)
    )


def test_too_many_samples_of_read_families_fail_the_scrape_early() -> None:
    """A partial reading would look like counters going down, so the body is refused
    (reason body_too_large) before its samples are parsed."""
    with pytest.raises(ScrapeError, match="more than 30000 samples") as raised:
        read_body(_models(MAX_SAMPLES + 1))
    assert raised.value.reason == "body_too_large"
    assert len(read_body(_models(MAX_SAMPLES - 1)).values) == MAX_SAMPLES - 1
