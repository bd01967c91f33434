"""The simulated node's whole exposition at a fixed virtual time, against a committed file
(as node_exporter's end-to-end test does): a change to any name, label, help text or value
shows up as a diff in review. Regenerate on purpose with
``.venv/bin/python -m tests.support.golden --update``."""

from __future__ import annotations

import difflib

from tests.support import golden


def test_simulated_node_exposition_matches_the_golden_file() -> None:
    committed = golden.PATH.read_text()
    now = golden.render()
    if now != committed:
        diff = "\n".join(
            list(
                difflib.unified_diff(
                    committed.splitlines(), now.splitlines(), "committed", "now", lineterm=""
                )
            )[:80]
        )
        raise AssertionError(
            "the exposition changed; if on purpose, run "
            f"`.venv/bin/python -m tests.support.golden --update` and commit:\n{diff}"
        )


def test_rendering_twice_gives_the_same_bytes() -> None:
    """The golden file is only useful if nothing in it depends on wall time or order."""
    assert golden.render() == golden.render()
