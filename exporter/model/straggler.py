"""What the node's model and the cluster's rules must agree on to name a straggler, declared
once: ``model.straggler_gap``'s default (exporter/model/config.py) and the GPUJobStraggler
rule's ``min_waiting_gap`` (mixin/config.py) are both :data:`GAP`.

Data only, importing nothing, so the mixin can read it without loading the daemon.
"""

from __future__ import annotations

GAP = 0.05
"""A GPU of a multi-GPU job holds the job back when a peer exchanging data waits at least
this much more of its time than it does (and at least twice as much). Measured on four
H200: 0.17-0.19 for peers of a rank doing 10 % more work, under 0.03 between the ranks of a
balanced job (docs/efficiency.md)."""
