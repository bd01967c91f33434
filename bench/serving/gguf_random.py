"""Write a random-weight llama-architecture GGUF for load tests of llama-server.

The GPU machine has no network, so no real model can be fetched; random weights make the
same kernels at the same sizes (and random tokens). The vocabulary is sentencepiece-style:
control tokens, the 256 byte pieces (any text tokenizes), letters and a few words. Uses the
``gguf`` package bundled with llama.cpp's source (``--gguf-py DIR``) and numpy.

    python3 -m bench.serving.gguf_random out.gguf --gguf-py llama.cpp/gguf-py --dim 2048 --layers 16
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

WORDS = ("the", "a", "and", "of", "to", "in", "is", "it", "that", "gpu", "token", "cache")


def vocab(gguf: Any) -> tuple[list[str], list[float], list[int]]:
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256))]
    kinds = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    kinds += [gguf.TokenType.BYTE] * 256
    pieces = ["\u2581", *"abcdefghijklmnopqrstuvwxyz", *(f"\u2581{w}" for w in WORDS)]
    tokens += pieces
    kinds += [gguf.TokenType.NORMAL] * len(pieces)
    scores = [0.0] * 259 + [len(p) - 100.0 for p in pieces]  # longer pieces win
    return tokens, scores, [int(k) for k in kinds]


def write(path: Path, dim: int, layers: int, heads: int, ff: int, ctx: int, seed: int) -> int:
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    dtype = np.float16

    def weight(*shape: int) -> Any:
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(dtype)

    tokens, scores, kinds = vocab(gguf)
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_name(f"goodput-random-{dim}x{layers}")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_context_length(ctx)
    w.add_embedding_length(dim)
    w.add_block_count(layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(heads)
    w.add_rope_dimension_count(dim // heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(kinds)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    params = 0

    def add(name: str, array: Any) -> None:
        nonlocal params
        params += array.size
        w.add_tensor(name, array)

    ones = np.ones(dim, dtype=np.float32)
    add("token_embd.weight", weight(len(tokens), dim))  # numpy (rows, cols) = ggml ne reversed
    for i in range(layers):
        add(f"blk.{i}.attn_norm.weight", ones)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            add(f"blk.{i}.{name}.weight", weight(dim, dim))
        add(f"blk.{i}.ffn_norm.weight", ones)
        add(f"blk.{i}.ffn_gate.weight", weight(ff, dim))
        add(f"blk.{i}.ffn_up.weight", weight(ff, dim))
        add(f"blk.{i}.ffn_down.weight", weight(dim, ff))
    add("output_norm.weight", ones)
    add("output.weight", weight(len(tokens), dim))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return params


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--gguf-py", type=Path, required=True, help="llama.cpp's gguf-py directory")
    p.add_argument("--dim", type=int, default=2048)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--ff", type=int, default=5632)
    p.add_argument("--ctx", type=int, default=8192)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    sys.path.insert(0, str(a.gguf_py))
    params = write(a.out, a.dim, a.layers, a.heads, a.ff, a.ctx, a.seed)
    print(f"wrote {a.out}: {params / 1e6:.0f} M parameters")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
