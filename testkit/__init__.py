"""Plumbing the bench scripts and the tests share: starting the daemon and other processes
(:mod:`testkit.harness`), a kubelet stand-in (:mod:`testkit.kubelet`) and the dependency
order of recording rules (:mod:`testkit.rules`).

It lives outside ``tests/`` so ``bench/`` imports nothing from the tests, and imports nothing
from ``bench/`` or ``tests/`` itself (``tests/test_bench_layout.py`` checks both).
"""
