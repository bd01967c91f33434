"""The first validation panel (``bench/gpu/gpu_validation.py``): real GPU workloads, each
with a known bottleneck. One per process on CUDA device 0::

    python3 -m bench.gpu.workloads large_gemm --seconds 30

``ready`` comes once the steady loop begins (after allocation and warm-up, so the orchestrator
starts its clock there); ``done`` carries the stats and ``wall_seconds``. ``--dry-run`` skips
torch (ready, sleep, done); the transformer's vLLM-style /metrics endpoint still runs then,
with a synthetic token rate.

The expected regime of each workload (what an expert would name) lives in ``EXPECTED``; the
orchestrator and the report read it from here so there is one source of truth.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.gpu.workloads.core import (
    Family,
    Runner,
    Stop,
    bf16_square,
    emit,
    host_work,
    load_torch,
    per_second,
    versions,
)

# name -> (expected regime, regimes also acceptable, expect a busy_unproductive flag?)
EXPECTED: dict[str, tuple[str, tuple[str, ...], bool | None]] = {
    "idle": ("idle", (), False),
    "allocated_idle": ("allocated_idle", (), False),
    "tiny_kernels": ("launch_bound", (), True),
    "small_gemm_sync": ("host_bound", ("launch_bound",), None),
    "large_gemm": ("compute_bound", (), False),
    "hbm_copy": ("memory_bound", (), False),
    "large_kernels_host_sleep": ("host_bound", (), False),
    "transformer_decode": ("memory_bound", (), False),
}
WORKLOADS = tuple(EXPECTED)
NO_PROCESS = ("idle",)
SERVING = ("transformer_decode",)
DESCRIPTIONS: dict[str, str] = {
    "idle": "no process on the GPU",
    "allocated_idle": "one process holds ~20 GB of device memory and sleeps",
    "tiny_kernels": "CUDA-graph replays of 2000 elementwise kernels on 256-element tensors, "
                    "back to back",
    "small_gemm_sync": "8 bf16 1024x1024 GEMMs, then .item() (host sync) and ~0.1 ms of host "
                       "work, repeated",
    "large_gemm": "bf16 8192x8192x8192 matmuls back to back",
    "hbm_copy": "read+write streaming kernel over two 2 GiB buffers",
    "large_kernels_host_sleep": "8 bf16 8192^3 matmuls (~11 ms), sync, 20 ms host sleep",
    "transformer_decode": "~6.7B-parameter decoder (bf16, hand-written attention with KV cache), "
                          "batch 8, prompt 128, 384 new tokens per batch; vLLM-style /metrics",
}

MODEL_NAME = "bench-decoder"
# Overridden by --device/--small for a CPU smoke run of the code paths (never for measurement).
DEV = "cuda"
SMALL = False


def size(full: int, small: int) -> int:
    return small if SMALL else full


@dataclass
class Ctx:
    """What every panel workload gets: the stop flag, its port and a place for its stats."""

    stop: Stop
    port: int = 0
    stats: dict[str, Any] = field(default_factory=dict)

    def running(self) -> bool:
        return not self.stop()


def ready(ctx: Ctx, **info: Any) -> None:
    ctx.stats["ready_at"] = time.monotonic()
    emit("ready", info=info)


def _torch() -> Any:
    # device 0 is the default; not selected explicitly, as the committed runs did not
    return load_torch(cuda=DEV == "cuda", device=None)


def _sync(torch: Any) -> None:
    if DEV == "cuda":
        torch.cuda.synchronize()


def _env_info(torch: Any) -> dict[str, Any]:
    return {**versions(torch),
            "device": torch.cuda.get_device_name(0) if DEV == "cuda" else DEV}


def _rate(ctx: Ctx, count: float) -> float:
    """``count`` per second since ready."""
    return per_second(count, time.monotonic() - ctx.stats.get("ready_at", time.monotonic()))


# --- workloads ------------------------------------------------------------------------------

def allocated_idle(ctx: Ctx) -> None:
    torch = _torch()
    nbytes = size(20 * 1024**3, 1024**2)
    block = torch.empty(nbytes, dtype=torch.uint8, device=DEV)
    block.fill_(1)  # touch it so the memory is really resident
    _sync(torch)
    ready(ctx, bytes=nbytes, **_env_info(torch))
    while ctx.running():
        time.sleep(0.2)
    ctx.stats["bytes"] = nbytes


def tiny_kernels(ctx: Ctx) -> None:
    torch = _torch()
    x = torch.zeros(256, device=DEV)
    per_replay = size(2000, 20)
    mode = "cuda_graph"
    graph = None
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                x.add_(1.0)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(per_replay):
                x.add_(1.0)
        graph.replay()
        torch.cuda.synchronize()
    except Exception as exc:  # graphs unavailable: fall back to eager launches
        mode = f"eager ({type(exc).__name__})"
        graph = None
    ready(ctx, mode=mode, kernels_per_replay=per_replay, **_env_info(torch))
    kernels = 0
    i = 0
    while ctx.running():
        if graph is not None:
            graph.replay()
            kernels += per_replay
        else:
            for _ in range(200):
                x.add_(1.0)
            kernels += 200
        i += 1
        if i % 16 == 0:
            _sync(torch)
    _sync(torch)
    ctx.stats.update(mode=mode, kernels=kernels, kernels_per_second=_rate(ctx, kernels))


def _gemm_operands(torch: Any, n: int) -> tuple[Any, Any, Any]:
    """Random bf16 n x n operands and an output, with the GEMM warmed up (cuBLAS picked)."""
    a = bf16_square(torch, n, DEV)
    b = bf16_square(torch, n, DEV)
    c = torch.empty(n, n, device=DEV, dtype=torch.bfloat16)
    for _ in range(3):
        torch.matmul(a, b, out=c)
    _sync(torch)
    return a, b, c


def small_gemm_sync(ctx: Ctx) -> None:
    torch = _torch()
    n = size(1024, 32)
    a, b, c = _gemm_operands(torch, n)
    ready(ctx, n=n, gemms_per_sync=8, **_env_info(torch))
    batches = 0
    while ctx.running():
        for _ in range(8):
            torch.matmul(a, b, out=c)
        c[0, 0].item()  # host sync, like reading back a sampled token
        host_work(0.0001)
        batches += 1
    ctx.stats.update(batches=batches, batches_per_second=_rate(ctx, batches),
                     tflops=_rate(ctx, batches * 8 * 2 * n**3) / 1e12)


def large_gemm(ctx: Ctx) -> None:
    torch = _torch()
    n = size(8192, 64)
    a, b, c = _gemm_operands(torch, n)
    ready(ctx, n=n, dtype="bf16", **_env_info(torch))
    count = 0
    while ctx.running():
        for _ in range(10):
            torch.matmul(a, b, out=c)
        count += 10
        torch.cuda.synchronize()
    ctx.stats.update(matmuls=count, tflops=_rate(ctx, count * 2 * n**3) / 1e12)


def hbm_copy(ctx: Ctx) -> None:
    torch = _torch()
    elems = size(1024**3, 1024)  # 2 GiB each in bf16: far beyond L2
    src = torch.randn(elems, device=DEV, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    torch.neg(src, out=dst)
    _sync(torch)
    ready(ctx, bytes_per_buffer=elems * 2, mode="elementwise kernel (neg), read+write",
          **_env_info(torch))
    passes = 0
    while ctx.running():
        for _ in range(10):
            torch.neg(src, out=dst)
            src, dst = dst, src
        passes += 10
        torch.cuda.synchronize()
    moved = passes * elems * 2 * 2
    ctx.stats.update(passes=passes, bytes_moved=moved, tb_per_second=_rate(ctx, moved) / 1e12)


def large_kernels_host_sleep(ctx: Ctx) -> None:
    torch = _torch()
    n = size(8192, 64)
    a, b, c = _gemm_operands(torch, n)
    ready(ctx, n=n, matmuls_per_burst=8, sleep_seconds=0.02, **_env_info(torch))
    busy = 0.0
    bursts = 0
    while ctx.running():
        t0 = time.perf_counter()
        for _ in range(8):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
        busy += time.perf_counter() - t0
        bursts += 1
        time.sleep(0.02)
    elapsed = time.monotonic() - ctx.stats["ready_at"]
    ctx.stats.update(bursts=bursts, gpu_busy_fraction=per_second(busy, elapsed))


# --- transformer decode with vLLM-style counters ---------------------------------------------

class VllmCounters:
    """The handful of vLLM metric names the serving scraper reads, on 127.0.0.1:port."""

    def __init__(self, port: int) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

        reg = CollectorRegistry()
        lbl = ["model_name"]
        self.prompt = Counter("vllm:prompt_tokens", "Prompt tokens processed.", lbl,
                              registry=reg).labels(MODEL_NAME)
        self.generation = Counter("vllm:generation_tokens", "Tokens generated.", lbl,
                                  registry=reg).labels(MODEL_NAME)
        self.running = Gauge("vllm:num_requests_running", "Requests running.", lbl,
                             registry=reg).labels(MODEL_NAME)
        self.waiting = Gauge("vllm:num_requests_waiting", "Requests waiting.", lbl,
                             registry=reg).labels(MODEL_NAME)
        self.cache = Gauge("vllm:gpu_cache_usage_perc", "KV cache usage (0-1).", lbl,
                           registry=reg).labels(MODEL_NAME)
        start_http_server(port, addr="127.0.0.1", registry=reg)


@dataclass(frozen=True)
class DecoderShape:
    d: int = 8192
    heads: int = 64
    layers: int = 8
    vocab: int = 32000
    batch: int = 8
    prompt: int = 128
    new_tokens: int = 384

    @property
    def max_seq(self) -> int:
        return self.prompt + self.new_tokens

    @property
    def params(self) -> int:
        """Weights read per token: 12 d^2 per layer plus the LM head (embedding is a gather)."""
        return self.layers * 12 * self.d * self.d + self.vocab * self.d


class Decoder:
    """A plain pre-norm decoder: RMSNorm, fused QKV, SDPA over a KV cache, GELU MLP."""

    def __init__(self, torch: Any, shape: DecoderShape, device: str | None = None) -> None:
        self.t = torch
        self.s = shape
        dt, dev = torch.bfloat16, device or DEV
        d = shape.d

        def w(rows: int, cols: int) -> Any:
            return torch.randn(rows, cols, device=dev, dtype=dt) * (1.0 / math.sqrt(rows))

        self.emb = torch.randn(shape.vocab, d, device=dev, dtype=dt)
        self.head = w(d, shape.vocab)
        self.layers = [
            {"qkv": w(d, 3 * d), "o": w(d, d), "up": w(d, 4 * d), "down": w(4 * d, d)}
            for _ in range(shape.layers)
        ]
        hd = d // shape.heads
        kv_shape = (shape.batch, shape.heads, shape.max_seq, hd)
        self.k = [torch.zeros(kv_shape, device=dev, dtype=dt) for _ in range(shape.layers)]
        self.v = [torch.zeros(kv_shape, device=dev, dtype=dt) for _ in range(shape.layers)]

    def _norm(self, x: Any) -> Any:
        # One fused kernel: small kernels between the GEMVs would dilute the memory-bound mix.
        return self.t.nn.functional.rms_norm(x, (self.s.d,), eps=1e-6)

    def step(self, tokens: Any, pos: int) -> Any:
        """Run ``tokens`` [B, T] starting at position ``pos``; returns the next tokens [B]."""
        F = self.t.nn.functional
        s = self.s
        b, n = tokens.shape
        hd = s.d // s.heads
        x = self.emb[tokens]
        for i, lw in enumerate(self.layers):
            h = self._norm(x) @ lw["qkv"]
            q, k, v = h.view(b, n, 3, s.heads, hd).permute(2, 0, 3, 1, 4)
            self.k[i][:, :, pos:pos + n] = k
            self.v[i][:, :, pos:pos + n] = v
            att = F.scaled_dot_product_attention(
                q, self.k[i][:, :, :pos + n], self.v[i][:, :, :pos + n], is_causal=n > 1
            )
            x = x + att.transpose(1, 2).reshape(b, n, s.d) @ lw["o"]
            x = x + F.gelu(self._norm(x) @ lw["up"]) @ lw["down"]
        logits = self._norm(x[:, -1]) @ self.head
        return logits.argmax(-1)


def transformer_decode(ctx: Ctx) -> None:
    torch = _torch()
    shape = (DecoderShape(d=64, heads=4, layers=2, vocab=100, prompt=8, new_tokens=16)
             if SMALL else DecoderShape())
    counters = VllmCounters(ctx.port)
    model = Decoder(torch, shape)
    with torch.inference_mode():
        tok = model.step(torch.randint(shape.vocab, (shape.batch, shape.prompt), device=DEV), 0)
        for i in range(4):
            tok = model.step(tok[:, None], shape.prompt + i)
        torch.cuda.synchronize()
        ready(ctx, model=MODEL_NAME, params=shape.params, flops_per_token=2 * shape.params,
              batch=shape.batch, prompt=shape.prompt, new_tokens=shape.new_tokens,
              d_model=shape.d, layers=shape.layers, port=ctx.port, **_env_info(torch))
        generated = prompt_tokens = 0
        while ctx.running():
            counters.running.set(shape.batch)
            counters.waiting.set(shape.batch)  # the next batch is always queued
            prompts = torch.randint(shape.vocab, (shape.batch, shape.prompt), device=DEV)
            tok = model.step(prompts, 0)
            _sync(torch)
            counters.prompt.inc(shape.batch * shape.prompt)
            prompt_tokens += shape.batch * shape.prompt
            pending = 0
            for i in range(shape.new_tokens):
                if not ctx.running():
                    break
                tok = model.step(tok[:, None], shape.prompt + i)
                pending += shape.batch
                if i % 8 == 7:
                    _sync(torch)  # count only tokens the GPU really produced
                    counters.generation.inc(pending)
                    generated += pending
                    pending = 0
                    counters.cache.set((shape.prompt + i + 1) / shape.max_seq)
            _sync(torch)
            counters.generation.inc(pending)
            generated += pending
        counters.running.set(0)
        counters.waiting.set(0)
    tps = _rate(ctx, generated)
    ctx.stats.update(generated_tokens=generated, prompt_tokens=prompt_tokens,
                     tokens_per_second=tps, params=shape.params,
                     model_tflops=tps * 2 * shape.params / 1e12)


def dry_run(name: str, ctx: Ctx) -> None:
    """No torch: say ready, (serve synthetic vLLM counters), wait for the stop."""
    counters = VllmCounters(ctx.port) if name in SERVING else None
    ready(ctx, dry_run=True, model=MODEL_NAME, params=DecoderShape().params,
          flops_per_token=2 * DecoderShape().params)
    while ctx.running():
        time.sleep(0.1)
        if counters is not None:
            counters.running.set(8)
            counters.generation.inc(200)  # 2000 tokens/s
    ctx.stats["dry_run"] = True


PANEL: dict[str, Callable[[Ctx], None]] = {
    "allocated_idle": allocated_idle,
    "tiny_kernels": tiny_kernels,
    "small_gemm_sync": small_gemm_sync,
    "large_gemm": large_gemm,
    "hbm_copy": hbm_copy,
    "large_kernels_host_sleep": large_kernels_host_sleep,
    "transformer_decode": transformer_decode,
}


def _in_ctx(body: Callable[[Ctx], None]) -> Runner:
    """Adapt a panel workload to the shared runner shape: settings from the arguments, stats
    (minus the internal ready time) returned for ``done``."""

    def run(stop: Stop, args: argparse.Namespace) -> dict[str, Any]:
        global DEV, SMALL
        DEV, SMALL = args.device, args.small
        ctx = Ctx(stop, port=args.port)
        body(ctx)
        ctx.stats.pop("ready_at", None)
        return ctx.stats

    return run


def _dry(stop: Stop, args: argparse.Namespace) -> dict[str, Any]:
    return _in_ctx(lambda ctx: dry_run(args.name, ctx))(stop, args)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=18080,
                        help="port of the vLLM-style /metrics endpoint (transformer_decode)")
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    parser.add_argument("--small", action="store_true", help=argparse.SUPPRESS)


FAMILY = Family(
    name="panel",
    summary="the first validation panel (gpu_validation.py)",
    add_arguments=add_arguments,
    runners={name: _in_ctx(body) for name, body in PANEL.items()},
    dry_run=_dry,
    wall_seconds=True,
    descriptions=DESCRIPTIONS,
)
