"""bench/gpu/transfers.py without a GPU: windows given to phases, the table, and the whole
pipeline on the simulated daemon with dry-run phases."""

from __future__ import annotations

import json
from pathlib import Path

from bench.gpu import transfers
from bench.gpu.workloads import transfer as transfer_workloads


def _row(wall: float, regime: str, util: float, graphics: float) -> dict[str, object]:
    return {"wall": wall, "util": util, "graphics": graphics, "sm_active": 0.0,
            "pcie_rx_Bps": 8e9, "pcie_tx_Bps": 5e8, "regime": "host_bound",
            "regime_seconds_delta": {regime: 1.0}, "unproductive": []}


def test_a_phase_keeps_only_its_own_windows_after_the_drop() -> None:
    rows = [_row(100.0 + i, "idle" if i < 3 else "host_bound", 0.16, 0.0) for i in range(10)]
    s = transfers.phase_summary(rows, start=101.0, end=108.0, drop=2, interval=1.0)
    # windows ending at 104..108 lie wholly in [103, 108]
    assert s["windows"] == 5 and s["raw_regime"] == "host_bound"
    assert s["copy_time"] == 0.16 and s["pcie_rx_Bps"] == 8e9


def test_every_phase_has_a_unique_name_and_a_known_kind() -> None:
    names = [p.name for p in transfer_workloads.PHASES]
    assert len(names) == len(set(names))
    assert {p.kind for p in transfer_workloads.PHASES} <= {
        "hold", "notebook", "copy", "overlap", "feed", "managed"}
    managed = [p for p in transfer_workloads.PHASES if p.kind == "managed"]
    assert managed and all(p.size <= 1024**3 for p in managed)  # far below any card's memory


def test_pipeline_on_the_simulated_daemon(tmp_path: Path) -> None:
    rc = transfers.main(["--simulate", "--out", str(tmp_path), "--phases",
                         "hold_1g,pageable_h2d_256m", "--phase-seconds", "4", "--gap", "0.5",
                         "--drop", "1"])
    assert rc == 0
    result = json.loads((tmp_path / "transfers.json").read_text())
    assert result["complete"] and set(result["phases"]) == {"hold_1g", "pageable_h2d_256m"}
    assert all(p["summary"]["windows"] >= 1 for p in result["phases"].values())
    table = (tmp_path / "transfers.md").read_text()
    assert "| pageable_h2d_256m |" in table and "SIMULATED" in table
