"""The one list of workloads: name -> family and runner, and the command line built from it."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from bench.gpu.workloads import diag, jobs, panel, split, transfer
from bench.gpu.workloads.core import Family, Runner

FAMILIES: tuple[Family, ...] = (panel.FAMILY, diag.FAMILY, transfer.FAMILY, jobs.FAMILY,
                                 split.FAMILY)


@dataclass(frozen=True)
class Workload:
    name: str
    family: Family
    run: Runner


def _registry() -> dict[str, Workload]:
    out: dict[str, Workload] = {}
    for family in FAMILIES:
        for name, run in family.runners.items():
            if name in out:  # one name, one workload: the orchestrators start them by name
                raise ValueError(f"workload {name!r} in {out[name].family.name} and {family.name}")
            out[name] = Workload(name, family, run)
    return out


REGISTRY = _registry()


def parser() -> argparse.ArgumentParser:
    """One sub-command per workload, with its family's options."""
    p = argparse.ArgumentParser(prog="python3 -m bench.gpu.workloads",
                                description="Start one GPU workload (JSON lines on stdout).")
    sub = p.add_subparsers(dest="name", required=True, metavar="NAME")
    for w in REGISTRY.values():
        s = sub.add_parser(w.name, help=f"[{w.family.name}] "
                           + w.family.descriptions.get(w.name, w.family.summary))
        if w.family.seconds is not None:
            s.add_argument("--seconds", type=float, default=w.family.seconds,
                           help="stop by itself after this long (a safety net; SIGTERM stops it)")
        s.add_argument("--dry-run", action="store_true",
                       help="no torch, no GPU: the pipeline check")
        w.family.add_arguments(s)
    return p
