"""[serving-truth] totals check against a running llama-server: this exporter scrapes it while
clients send complete (non-streamed) requests with a known token count; the exporter's
cumulative token totals must equal the sums the clients were told, and its derived gauges
(J/token, tokens per SM-second, regime) are sampled every second meanwhile.

    python3 -m bench.serving.serving_equality --llama-url http://127.0.0.1:8080 --out DIR \
        [--requests 48 --concurrency 8 --n-predict 256] [exporter args, e.g. --simulate]
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

from testkit.harness import DaemonProcess

HERE = Path(__file__).resolve().parent

PROMPTS = ("the gpu and the cache", "a token of the cache", "it is the gpu", "and that is it")


def complete(url: str, prompt: str, n_predict: int) -> dict[str, Any]:
    body = json.dumps({"prompt": prompt, "n_predict": n_predict, "cache_prompt": True,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request(url + "/completion", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        out: dict[str, Any] = json.loads(resp.read())
    return out


def exporter_state(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    tokens: dict[str, float] = {}
    gauges: dict[str, float] = {}
    regime = ""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "goodput_gpu_tokens_total":
                kind = s.labels["kind"]
                tokens[kind] = tokens.get(kind, 0.0) + s.value
            elif s.name in ("goodput_gpu_joules_per_token", "goodput_gpu_tokens_per_sm_second",
                            "goodput_gpu_sm_active_ratio", "goodput_gpu_power_watts",
                            "goodput_gpu_utilization_ratio") and s.labels.get("gpu") == "0":
                gauges[s.name.removeprefix("goodput_gpu_")] = s.value
            elif s.name == "goodput_gpu_regime" and s.labels.get("gpu") == "0":
                regime = s.labels["regime"]
    return {"tokens": tokens, "gauges": gauges, "regime": regime}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--llama-url", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--requests", type=int, default=48)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--n-predict", type=int, default=256)
    args, extra = p.parse_known_args()
    args.out.mkdir(parents=True, exist_ok=True)
    target = {"serving": {"targets": [{"url": args.llama_url.rstrip("/") + "/metrics",
                                       "gpus": ["0"]}]}}
    daemon = DaemonProcess("--interval", "1", *extra, config=target,
                           log=args.out / "serving_equality-daemon.log")
    daemon.start()
    samples: list[dict[str, Any]] = []
    client = {"generation": 0, "prompt": 0, "prompt_cached": 0}
    try:
        before = exporter_state(daemon.url)
        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
            futures = [pool.submit(complete, args.llama_url.rstrip("/"),
                                   PROMPTS[i % len(PROMPTS)], args.n_predict)
                       for i in range(args.requests)]
            while not all(f.done() for f in futures):
                samples.append({"t": round(time.monotonic() - started, 1),
                                **exporter_state(daemon.url)})
                time.sleep(1.0)
            for f in futures:
                r = f.result()
                cached = int(r.get("timings", {}).get("cache_n", 0) or 0)
                client["generation"] += int(r["tokens_predicted"])
                client["prompt"] += int(r["tokens_evaluated"]) - cached
                client["prompt_cached"] += cached
        deadline = time.monotonic() + 15
        while True:
            after = exporter_state(daemon.url)
            delta = {k: after["tokens"].get(k, 0.0) - before["tokens"].get(k, 0.0)
                     for k in client}
            if all(round(delta[k]) == client[k] for k in client) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        for _ in range(4):  # the load has ended: gauges must go away
            time.sleep(1.0)
            samples.append({"t": round(time.monotonic() - started, 1),
                            **exporter_state(daemon.url)})
    finally:
        daemon.stop()
    result = {"client": client, "exporter_delta": delta,
              "equal": all(round(delta[k]) == client[k] for k in client),
              "requests": args.requests, "n_predict": args.n_predict,
              "concurrency": args.concurrency, "samples": samples}
    (args.out / "serving_equality.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}))
    return 0 if result["equal"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
