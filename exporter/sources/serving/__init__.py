"""Serving-engine source: tokens, requests and KV usage of inference engines, per GPU.

Wire it with ``build_sources`` (``exporter/sources/serving/build.py``); its section is
``exporter/sources/serving/config.py``; docs/serving.md describes engines, discovery and
attribution.

One scrape goes through four stages, each a set of modules that imports only from the
stages before it (``tests/serving/test_pipeline_order.py`` holds them to it):

1. **read**: ``fetch`` (HTTP, bounded body and time), ``auth`` (credentials);
2. **parse and adapt**: ``exposition`` (the body into families), ``signals`` (what is read,
   declared once), ``engines`` (each engine's names), ``adapter`` (families into a
   reading), ``scrape`` (one target from URL to reading, never raising);
3. **ledger**: ``accumulate`` (counters that only go up, across restarts and lazy series),
   ``account`` (a reading into the ledger), ``state`` (a target's standing);
4. **publish**: ``families`` (the metric families), ``source`` (the schedule and the
   snapshot).

Around them: ``targets``, ``aliases``, ``discovery`` and ``procfs`` say what to scrape,
``attribution`` which GPUs a target's work belongs to, ``pool`` how scrapes share the slots,
``errors`` the one error every stage raises.
"""
