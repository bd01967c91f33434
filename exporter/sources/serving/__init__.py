"""Serving-engine source: tokens, requests and KV usage of inference engines, per GPU.

Wire it with ``build_sources`` (``exporter/sources/serving/build.py``); its section is
``exporter/sources/serving/config.py``; docs/serving.md describes engines, discovery and
attribution.
"""
