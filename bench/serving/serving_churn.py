"""Model-name churn: one serving target whose ``model_name`` changes on every scrape, for
N minutes, against the real daemon on the simulated node (issue 22, item 1).

The engine does no work (its counters stay flat at 5e8/1e8 tokens), and a second, honest
target runs beside it. Every 30 s the bench reads the daemon's /metrics (series in total,
goodput_gpu_tokens_total series, their sum) and its VmRSS. Without bounds the series grew
by 2 per scrape and never went away, and the flat engine published billions of tokens.

    python3 -m bench.serving.serving_churn --minutes 10 > churn.md
    python3 -m bench.serving.serving_churn --minutes 10 --unbounded   # caps raised out of reach
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import aiohttp
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from testkit.harness import DaemonProcess, free_port

HERE = Path(__file__).resolve().parent

TOKENS = "goodput_gpu_tokens_total"


def body(model: str, generation: float, prompt: float) -> str:
    return (
        "# TYPE vllm:generation_tokens_total counter\n"
        f'vllm:generation_tokens_total{{model_name="{model}"}} {generation}\n'
        "# TYPE vllm:prompt_tokens_total counter\n"
        f'vllm:prompt_tokens_total{{model_name="{model}"}} {prompt}\n'
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{model_name="{model}"}} 1\n'
    )


class Engines:
    def __init__(self) -> None:
        self.churn_scrapes = 0
        self.honest_tokens = 0.0

    async def churn(self, _: web.Request) -> web.Response:
        self.churn_scrapes += 1
        return web.Response(text=body(f"model-{self.churn_scrapes}", 5e8, 1e8))

    async def honest(self, _: web.Request) -> web.Response:
        self.honest_tokens += 50.0
        return web.Response(text=body("honest", self.honest_tokens, 0.0))


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def measure(text: str) -> tuple[int, int, float, int]:
    """(series, token series, sum of churn-target tokens, distinct churn models)."""
    series = token_series = 0
    churn_sum = 0.0
    models: set[str] = set()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            series += 1
            if s.name == TOKENS:
                token_series += 1
                if s.labels.get("model", "").startswith("model-"):
                    churn_sum += s.value
                    models.add(s.labels["model"])
    return series, token_series, churn_sum, len(models)


async def run(minutes: float, unbounded: bool) -> list[dict[str, object]]:
    engines = Engines()
    app = web.Application()
    app.router.add_get("/churn/metrics", engines.churn)
    app.router.add_get("/honest/metrics", engines.honest)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    serving: dict[str, object] = {
        "interval": 1.0,
        "targets": [
            {"url": f"http://127.0.0.1:{port}/churn/metrics", "gpus": ["0"]},
            {"url": f"http://127.0.0.1:{port}/honest/metrics", "gpus": ["1"]},
        ],
    }
    if unbounded:
        serving.update(max_models_per_target=1000, stale_after=86400,
                       max_tokens_per_second_per_gpu=1e300)
    daemon = DaemonProcess("--simulate", "--simulate-gpus", "2", config={"serving": serving},
                           log=Path("/tmp/serving-churn-daemon.log"))
    await asyncio.to_thread(daemon.start)
    assert daemon.pid is not None
    samples: list[dict[str, object]] = []
    start = time.monotonic()
    async with aiohttp.ClientSession() as http:
        while True:
            elapsed = time.monotonic() - start
            async with http.get(daemon.url + "/metrics") as resp:
                text = await resp.text()
            series, token_series, churn_sum, models = measure(text)
            sample: dict[str, object] = {
                "minute": round(elapsed / 60, 2), "engine_scrapes": engines.churn_scrapes,
                "series": series, "token_series": token_series, "churn_models": models,
                "churn_tokens_published": churn_sum, "rss_mib": round(rss_kb(daemon.pid) / 1024, 1),
            }
            samples.append(sample)
            print(json.dumps(sample), file=sys.stderr, flush=True)
            if elapsed >= minutes * 60:
                break
            await asyncio.sleep(min(30.0, minutes * 60 - elapsed + 0.01))
    daemon.stop()
    await runner.cleanup()
    return samples


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--unbounded", action="store_true",
                   help="raise the caps out of reach (the behaviour before the bounds)")
    args = p.parse_args()
    samples = asyncio.run(run(args.minutes, args.unbounded))
    print("| minute | engine scrapes | series | token series | churn models | "
          "churn tokens published | RSS MiB |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for s in samples:
        print(f"| {s['minute']} | {s['engine_scrapes']} | {s['series']} | {s['token_series']} | "
              f"{s['churn_models']} | {s['churn_tokens_published']:.4g} | {s['rss_mib']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
