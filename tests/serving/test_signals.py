"""Each serving signal is declared once (exporter/sources/serving/signals.py) and every
place on its path reads that declaration (issue #32)."""

from __future__ import annotations

import dataclasses

import pytest

from exporter.readings import ServedModel
from exporter.sources.serving import engines
from exporter.sources.serving.signals import ALL, FIELDS, TOKENS


def test_served_model_has_one_field_per_declared_signal() -> None:
    fields = {f.name for f in dataclasses.fields(ServedModel)}
    assert fields == {"model", "engine", "tokens"} | {s.served_as for s in FIELDS}


def test_a_table_naming_an_undeclared_signal_fails_at_import() -> None:
    with pytest.raises(ValueError, match="ttft_seconds_sum"):
        engines._alts(ttft_seconds_sum=engines.r("vllm:time_to_first_token_seconds"))


def test_names_and_token_kinds_are_unique() -> None:
    assert len({s.name for s in ALL}) == len(ALL)
    assert len({s.token_kind for s in TOKENS}) == len(TOKENS)
    assert all(s.kind == "counter" for s in TOKENS)


def test_outcome_and_latency_families_only_recognise_an_engine() -> None:
    """Request outcomes, TTFT and inter-token latency are markers (scored for detection)
    and no reading parses them (docs/serving.md "Normalised signals")."""
    from exporter.sources.serving.engines import VLLM_V1

    assert "vllm:time_to_first_token_seconds" in VLLM_V1.families()
    present = VLLM_V1.families()
    assert "vllm:time_to_first_token_seconds" not in VLLM_V1.needs(present)
    assert "vllm:request_success" not in VLLM_V1.needs(present)
