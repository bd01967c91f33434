"""Parsing a scraped body into families keyed by their ``# TYPE`` name."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample as PromSample


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
    families: dict[str, Family] = {}
    try:
        for metric in text_string_to_metric_families(text):
            old = families.get(metric.name)
            samples = tuple(metric.samples) if old is None else old.samples + tuple(metric.samples)
            families[metric.name] = Family(metric.name, metric.type, samples)
    except Exception as exc:  # the parser raises ValueError, IndexError, ... on bad bytes
        raise ExpositionError(f"not Prometheus text: {_short(exc)}") from exc
    return families


def _short(exc: Exception, limit: int = 120) -> str:
    text = str(exc).replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 3] + "..."
