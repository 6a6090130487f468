#!/usr/bin/env python3
"""One transformer layer's forward and backward in eager PyTorch on one GPU (bf16, causal SDPA with the
default backend), for GPT-style (LayerNorm, GeLU MLP) and LLaMA-style (RMSNorm, SwiGLU, grouped-query,
rotary) layers of real model sizes. The planner predicts the same layer from its kernel model
(bench/planner/gpu/compare_layers.py), so this checks the per-layer compute a whole framework step
reaches against the sum of separately measured kernels.

    python3 measure_layers.py --out FILE.json [--smoke]
"""
import argparse
import json

import torch
import torch.nn.functional as F

from loop_timing import loop_seconds

# family, hidden, heads, kv heads, ffn, seq, micro-batch
LAYERS = [
    ("gpt", 4096, 32, 32, 16384, 2048, 4),
    ("gpt", 5120, 40, 40, 20480, 2048, 4),
    ("gpt", 8192, 64, 64, 32768, 2048, 2),
    ("gpt", 12288, 96, 96, 49152, 2048, 1),
    ("llama", 4096, 32, 8, 14336, 8192, 1),
    ("llama", 8192, 64, 8, 28672, 4096, 1),
]


class Layer(torch.nn.Module):
    def __init__(self, family, hidden, heads, kv, ffn):
        super().__init__()
        self.family, self.heads, self.kv, self.head_dim = family, heads, kv, hidden // heads
        bias = family == "gpt"
        self.norm1 = torch.nn.LayerNorm(hidden) if bias else torch.nn.RMSNorm(hidden)
        self.norm2 = torch.nn.LayerNorm(hidden) if bias else torch.nn.RMSNorm(hidden)
        self.qkv = torch.nn.Linear(hidden, (heads + 2 * kv) * self.head_dim, bias=bias)
        self.proj = torch.nn.Linear(hidden, hidden, bias=bias)
        self.up = torch.nn.Linear(hidden, ffn * (1 if bias else 2), bias=bias)
        self.down = torch.nn.Linear(ffn, hidden, bias=bias)

    def rotate(self, x, cos, sin):
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(
            [self.heads * self.head_dim, self.kv * self.head_dim, self.kv * self.head_dim], dim=-1)
        q = q.view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(b, s, self.kv, self.head_dim).transpose(1, 2)
        v = v.view(b, s, self.kv, self.head_dim).transpose(1, 2)
        if self.family == "llama":
            q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv != self.heads)
        x = x + self.proj(o.transpose(1, 2).reshape(b, s, -1))
        h = self.up(self.norm2(x))
        if self.family == "gpt":
            h = F.gelu(h, approximate="tanh")
        else:
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        return x + self.down(h)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    device = torch.device("cpu" if args.smoke else "cuda")
    dtype = torch.float32 if args.smoke else torch.bfloat16
    results = []
    for family, hidden, heads, kv, ffn, seq, batch in LAYERS:
        if args.smoke:
            hidden, ffn, seq, heads, kv = hidden // 64, ffn // 64, seq // 32, max(heads // 16, 1), max(kv // 16, 1)
        torch.manual_seed(0)
        layer = Layer(family, hidden, heads, kv, ffn).to(device=device, dtype=dtype)
        x = torch.randn(batch, seq, hidden, device=device, dtype=dtype, requires_grad=True)
        grad = torch.randn_like(x)
        head_dim = hidden // heads
        inv = 1.0 / (500000 ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
        angles = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv)
        cos = torch.cat((angles.cos(), angles.cos()), -1).to(dtype)
        sin = torch.cat((angles.sin(), angles.sin()), -1).to(dtype)

        def step():
            out = layer(x, cos, sin)
            out.backward(grad)

        def forward():
            with torch.no_grad():
                layer(x, cos, sin)

        timings = {}
        for name, fn in (("forward", forward), ("forward_backward", step)):
            for _ in range(3):
                fn()
            reps = 2 if args.smoke else 10
            timings[name] = loop_seconds(fn, reps, device.type == "cuda") / reps
        record = {"family": family, "hidden": hidden, "heads": heads, "kv_heads": kv, "ffn": ffn, "seq": seq,
                  "micro_batch": batch, "dtype": str(dtype), **{f"{k}_s": v for k, v in timings.items()}}
        results.append(record)
        print(record, flush=True)
        del layer, x, grad
        if device.type == "cuda":
            torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump({"schema": "strata-gpu-layers-1", "torch": torch.__version__,
                   "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                   "layers": results}, f, indent=1)


if __name__ == "__main__":
    main()
