"""[split] a llama-server spanning GPUs (its own multi-GPU mode, ``-sm layer`` / ``-sm row``):
the exporter scrapes it while clients send complete requests of known token counts; its
token totals must equal the clients' sums, and the engine's GPUs must show as one job with
its split (``goodput_gpu_job_seconds_total{part}``) on /metrics and on the landing page.

    python3 -m bench.serving.split_serving --llama-url http://127.0.0.1:8080 --gpus 0,1 \\
        --out DIR [--requests 64 --concurrency 8 --n-predict 256] [exporter args]

Writes ``serving-split.json`` (client and exporter totals, the split per GPU over the load,
every second's scrape) and ``landing.html`` (the page as served during the load).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import time
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench.serving.serving_equality import PROMPTS, complete
from testkit.harness import DaemonProcess

PARTS = ("working", "transferring", "waiting", "host_stalled", "idle")


def state(url: str, gpus: list[str]) -> dict[str, Any]:
    """Tokens (by kind, summed over the engine's GPUs, and per GPU), each GPU's cumulative
    job seconds per part, job identities, and every job-level token or split series."""
    with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, Any] = {"tokens": {}, "tokens_per_gpu": {}, "parts": {}, "job_info": {},
                           "job_series": [], "util": {}, "sm_active": {}}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            gpu = s.labels.get("gpu")
            if s.name == "goodput_gpu_tokens_total":
                kind = s.labels.get("kind", "?")
                out["tokens"][kind] = out["tokens"].get(kind, 0.0) + s.value
                per = out["tokens_per_gpu"].setdefault(str(gpu), {})
                per[kind] = per.get(kind, 0.0) + s.value
            elif s.name == "goodput_gpu_job_seconds_total" and gpu in gpus:
                out["parts"].setdefault(gpu, {})[s.labels.get("part")] = s.value
            elif s.name == "goodput_gpu_job_info" and gpu in gpus:
                out["job_info"][gpu] = f"{s.labels.get('job_source')}:{s.labels.get('job_id')}"
            elif s.name == "goodput_gpu_utilization_ratio" and gpu in gpus:
                out["util"][gpu] = s.value
            elif s.name == "goodput_gpu_sm_active_ratio" and gpu in gpus:
                out["sm_active"][gpu] = s.value
            elif s.name.startswith("goodput_job") and ("token" in s.name or "part" in s.labels):
                out["job_series"].append({"name": s.name, "labels": s.labels, "value": s.value})
    return out


def split_between(a: dict[str, Any], b: dict[str, Any], gpu: str, seconds: float
                  ) -> dict[str, float]:
    first, last = a["parts"].get(gpu), b["parts"].get(gpu)
    if not first or not last:
        return {}
    delta = {p: last.get(p, 0.0) - first.get(p, 0.0) for p in PARTS}
    total = sum(delta.values())
    if total <= 0:
        return {}
    out = {p: round(v / total, 4) for p, v in delta.items()}
    out["sum"] = round(total / seconds, 4) if seconds > 0 else 0.0
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--llama-url", required=True)
    p.add_argument("--gpus", default="0,1")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--n-predict", type=int, default=256)
    args, extra = p.parse_known_args()
    args.out.mkdir(parents=True, exist_ok=True)
    gpus = args.gpus.split(",")
    url = args.llama_url.rstrip("/")
    target = {"serving": {"targets": [{"url": url + "/metrics", "gpus": gpus}]}}
    daemon = DaemonProcess("--interval", "1", "--extended-metrics", *extra, config=target,
                           log=args.out / "serving-split-daemon.log")
    daemon.start(timeout=60)
    samples: list[dict[str, Any]] = []
    client = {"generation": 0, "prompt": 0, "prompt_cached": 0}
    landing = ""
    try:
        time.sleep(3)  # a few windows with the engine idle but loaded
        before = state(daemon.url, gpus)
        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
            futures = [pool.submit(complete, url, PROMPTS[i % len(PROMPTS)], args.n_predict)
                       for i in range(args.requests)]
            while not all(f.done() for f in futures):
                samples.append({"t": round(time.monotonic() - started, 2),
                                **state(daemon.url, gpus)})
                if not landing and time.monotonic() - started > 8:
                    with urllib.request.urlopen(daemon.url + "/", timeout=5) as resp:
                        landing = resp.read().decode()
                time.sleep(1.0)
            for f in futures:
                r = f.result()
                cached = int(r.get("timings", {}).get("cache_n", 0) or 0)
                client["generation"] += int(r["tokens_predicted"])
                client["prompt"] += int(r["tokens_evaluated"]) - cached
                client["prompt_cached"] += cached
        load_s = time.monotonic() - started
        loaded = samples[-1] if samples else before
        deadline = time.monotonic() + 15
        while True:
            after = state(daemon.url, gpus)
            delta = {k: after["tokens"].get(k, 0.0) - before["tokens"].get(k, 0.0)
                     for k in client}
            if all(round(delta[k]) == client[k] for k in client) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if not landing:
            with urllib.request.urlopen(daemon.url + "/", timeout=5) as resp:
                landing = resp.read().decode()
    finally:
        daemon.stop()
    first = next((s for s in samples if s["t"] >= 3.0), before)
    span = max(loaded["t"] - first.get("t", 0.0), 0.0) if "t" in loaded else 0.0
    splits = {g: split_between(first, loaded, g, span) for g in gpus}
    table = landing[landing.find("Multi-GPU jobs"):]
    table = table[:table.find("</table>") + 8]
    row = next((r for r in table.split("<tr") if ", ".join(gpus) in r), "")
    page = {"multi_gpu_jobs_table": bool(table),
            "job_row_over_the_gpus": bool(row),
            # the engine's GPUs and no other (no load of another program folded into its job)
            "job_row_exactly_its_gpus": f"<td>{', '.join(gpus)}</td>" in row,
            "job_row": row,
            "split_columns": all(h in table for h in ("Work", "Transfer", "Wait", "Host")),
            "tokens_in_job_table": "oken" in table,
            "tokens_in_gpu_rows": "Tokens/s" in landing,
            "jobs_table": table}
    jobs = {v for v in loaded.get("job_info", {}).values()}
    result = {"client": client, "exporter_delta": delta,
              "equal": all(round(delta[k]) == client[k] for k in client),
              "one_job_over_gpus": len(jobs) == 1 and len(loaded.get("job_info", {})) == len(gpus),
              "job_info": loaded.get("job_info"), "split": splits, "load_seconds": load_s,
              "landing": page, "requests": args.requests, "n_predict": args.n_predict,
              "concurrency": args.concurrency, "gpus": gpus, "samples": samples}
    (args.out / "serving-split.json").write_text(json.dumps(result, indent=1))
    (args.out / "landing.html").write_text(landing)
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}))
    return 0 if result["equal"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
