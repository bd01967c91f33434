"""The exporter's own process, below every other layer: its logging (``logging``, with
log damping in ``logdamp`` and summaries of what was damped in ``logsummary``) and its
memory and interpreter tuning (``memory``, ``interpreter``)."""
