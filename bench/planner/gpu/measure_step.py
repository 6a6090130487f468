#!/usr/bin/env python3
"""One whole training step of a small GPT and LLaMA on one GPU in eager PyTorch, as users write it
(bf16 autocast over f32 weights, causal SDPA, fused AdamW), timed whole and then decomposed into its
kernels with PyTorch's profiler. compare_step.py prices the same step with `strata plan` and sets the
decomposition beside it: which kernel classes, and how much time outside kernels (launch gaps, host),
make up the step.

    python3 measure_step.py --out FILE.json [--trace-dir DIR] [--compile] [--smoke]

Only torch and the standard library. The step's time is a pair of CUDA events around `--steps` whole
steps (forward, backward, optimizer, zero_grad) with no host sync inside; the profiler runs afterwards
on two more steps, so it does not slow the timed ones. --compile runs the model under torch.compile (fused
element-wise kernels, as a fused framework would run them); its compilation falls in the warm-up steps."""
import argparse
import gzip
import json
import os
import tempfile
import time

import torch
import torch.nn.functional as F

from gpu_clocks import ClockSampler
from measure_layers import Layer  # one transformer layer, as measure_layers.py times it

# name, family, layers, hidden, heads, kv heads, ffn, vocab, seq, micro-batch
MODELS = [
    ("gpt2-124m", "gpt", 12, 768, 12, 12, 3072, 50304, 1024, 16),
    ("gpt-1.3b", "gpt", 24, 2048, 16, 16, 8192, 50304, 2048, 4),
    ("llama-1b", "llama", 16, 2048, 32, 8, 8192, 128256, 2048, 4),
]


class Model(torch.nn.Module):
    def __init__(self, family, layers, hidden, heads, kv, ffn, vocab, seq):
        super().__init__()
        self.family = family
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.pos = torch.nn.Embedding(seq, hidden) if family == "gpt" else None
        self.blocks = torch.nn.ModuleList(Layer(family, hidden, heads, kv, ffn) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(hidden) if family == "gpt" else torch.nn.RMSNorm(hidden)
        self.head = torch.nn.Linear(hidden, vocab, bias=False)
        if family == "gpt":
            self.head.weight = self.embed.weight  # tied, as GPT-2
        head_dim = hidden // heads
        inv = 1.0 / (500000 ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        angles = torch.outer(torch.arange(seq, dtype=torch.float32), inv)
        self.register_buffer("cos", torch.cat((angles.cos(), angles.cos()), -1), persistent=False)
        self.register_buffer("sin", torch.cat((angles.sin(), angles.sin()), -1), persistent=False)

    def forward(self, tokens, targets):
        x = self.embed(tokens)
        if self.pos is not None:
            x = x + self.pos.weight[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x, self.cos, self.sin)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


# Kernel classes by name; the first pattern that matches wins. The raw per-kernel totals are kept too.
CLASSES = [
    ("attention", ("flash", "fmha", "cudnn", "attention", "sdpa")),
    ("gemm", ("gemm", "cutlass", "xmma", "nvjet", "cublas", "sm90_", "sm80_", "splitk", "dot_kernel")),
    ("optimizer", ("adam", "multi_tensor", "foreach")),
    ("norm", ("layer_norm", "layernorm", "rms_norm", "rmsnorm")),
    ("cross_entropy", ("softmax", "nll", "cross_entropy", "logsoftmax")),
    ("embedding", ("embedding", "index_select", "indexselect", "scatter", "gather")),
    ("reduction", ("reduce", "sum_", "norm_kernel")),
    ("copy_cast", ("copy", "cast", "cat_", "catarray", "fill", "memset", "memcpy")),
    ("elementwise", ("elementwise", "vectorized", "unrolled", "pointwise")),
]


def kernel_class(name):
    low = name.lower()
    for cls, patterns in CLASSES:
        if any(p in low for p in patterns):
            return cls
    return "other"


def decompose(trace_path, steps):
    """Per-class kernel time, kernel count, and the time the GPU sat idle between the first and last kernel."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    kernels = sorted(((e["ts"], e["dur"], e["name"]) for e in events
                      if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("ph") == "X"),
                     key=lambda k: k[0])
    by_class, by_name, busy, end = {}, {}, 0.0, None
    for ts, dur, name in kernels:
        cls = kernel_class(name)
        by_class[cls] = by_class.get(cls, 0.0) + dur
        entry = by_name.setdefault(name, [cls, 0, 0.0])
        entry[1] += 1
        entry[2] += dur
        start = ts if end is None else max(ts, end)
        busy += max(0.0, ts + dur - start)
        end = ts + dur if end is None else max(end, ts + dur)
    span = (end - kernels[0][0]) if kernels else 0.0
    top = sorted(by_name.items(), key=lambda kv: -kv[1][2])[:60]
    return {"steps": steps, "kernels": len(kernels), "span_s": span / 1e6 / steps, "busy_s": busy / 1e6 / steps,
            "idle_s": (span - busy) / 1e6 / steps,
            "classes_s": {c: t / 1e6 / steps for c, t in sorted(by_class.items(), key=lambda kv: -kv[1])},
            "top_kernels": [{"name": n[:160], "class": c, "calls": k / steps, "seconds": t / 1e6 / steps}
                            for n, (c, k, t) in top]}


def measure(spec, device, args):
    name, family, layers, hidden, heads, kv, ffn, vocab, seq, batch = spec
    if args.smoke:
        layers, hidden, ffn, vocab, seq, batch = 2, hidden // 16, ffn // 16, vocab // 64, seq // 16, 2
        heads, kv = max(heads // 4, 1), max(kv // 4, 1)
    torch.manual_seed(0)
    model = Model(family, layers, hidden, heads, kv, ffn, vocab, seq).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    if args.compile:
        torch._dynamo.reset()  # each model compiles afresh, static shapes, so no recompilation lands in the timed steps
    forward = torch.compile(model, dynamic=False) if args.compile else model
    tokens = torch.randint(0, vocab, (batch, seq), device=device)
    targets = torch.randint(0, vocab, (batch, seq), device=device)
    cuda = device.type == "cuda"

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = forward(tokens, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    reps = 2 if args.smoke else args.steps
    if cuda:
        torch.cuda.synchronize()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    begin = time.perf_counter()
    # The clock the timed steps ran at: a step that is half memory-bound may hold the boost clock where
    # back-to-back GEMMs drop to the power limit's.
    with ClockSampler() as clocks:
        for _ in range(reps):
            step()
        if cuda:
            stop.record()
            stop.synchronize()
    step_s = start.elapsed_time(stop) / 1e3 / reps if cuda else (time.perf_counter() - begin) / reps
    wall_s = (time.perf_counter() - begin) / reps
    record = {"name": name, "compiled": args.compile, "family": family, "n_layer": layers, "hidden": hidden, "heads": heads, "kv_heads": kv,
              "ffn": ffn, "vocab": vocab, "seq": seq, "micro_batch": batch,
              "parameters": sum(p.numel() for p in model.parameters()), "timed_steps": reps,
              "step_s": step_s, "host_wall_step_s": wall_s, "tokens_per_s": batch * seq / step_s,
              "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
              "clocks": clocks.summary()}
    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    with tempfile.TemporaryDirectory() as work:
        trace = os.path.join(work, "trace.json")
        with torch.profiler.profile(activities=activities) as prof:
            for _ in range(2):
                step()
            if cuda:
                torch.cuda.synchronize()
        prof.export_chrome_trace(trace)
        if cuda:
            record["profile"] = decompose(trace, 2)
        if args.trace_dir:
            with open(trace, "rb") as src, gzip.open(os.path.join(args.trace_dir, f"{name}{'-compiled' if args.compile else ''}.json.gz"), "wb") as dst:
                dst.write(src.read())
    del model, forward, optimizer
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    return record


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per model")
    parser.add_argument("--trace-dir", help="also keep each model's profiler trace (gzipped) here")
    parser.add_argument("--compile", action="store_true", help="the model under torch.compile")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU (tests the script)")
    args = parser.parse_args()
    device = torch.device("cpu" if args.smoke else "cuda")
    if not args.smoke:
        torch.backends.cuda.matmul.allow_tf32 = False  # the autocast region is bf16; f32 outside it stays f32
    results = []
    for spec in MODELS:
        record = measure(spec, device, args)
        results.append(record)
        print({k: v for k, v in record.items() if k != "profile"}, flush=True)
        if "profile" in record:
            print("  classes (ms/step):", {c: round(1e3 * t, 3) for c, t in record["profile"]["classes_s"].items()},
                  "idle", round(1e3 * record["profile"]["idle_s"], 3), flush=True)
        with open(args.out, "w") as f:  # rewritten per model: a run cut short keeps what it measured
            json.dump({"schema": "strata-gpu-step-1", "torch": torch.__version__,
                       "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                       "steps": results}, f, indent=1)


if __name__ == "__main__":
    main()
