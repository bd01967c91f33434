"""Serving engines: totals against a real llama-server, churn."""
