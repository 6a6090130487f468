#!/usr/bin/env python3
"""Measure GEMM, attention, bandwidth-bound and launch times on one GPU, to calibrate a device preset of
Strata's planner (tile and wave quantization, alignment, the small-size regime, attention, HBM-bound ops).

    python3 measure_kernels.py --out FILE.json [--budget-s 240] [--smoke]

Only torch and the standard library. --smoke runs the same code on the CPU with tiny shapes and few reps
(to test the script without a GPU). The GPU run keeps to --budget-s: every section gets a share of the
time left, in proportion to its estimated cost, and what does not fit is listed under "skipped". The JSON
is rewritten after every section, so a run killed from outside still leaves what it measured.
See README.md next to this file for the schema.
"""

import argparse
import ctypes
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

from loop_timing import loop_seconds

SCHEMA = "strata-gpu-kernels-1"
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}

# Rough H200 rates, used only to estimate the run time and to split the budget between sections.
RATE = {"bfloat16": 700e12, "float32": 50e12, "attn_fwd": 450e12, "attn_bwd": 350e12, "hbm": 4e12}
FLOOR_S = 8e-6      # host cost of one eager PyTorch call: tiny kernels are launch-bound
OVERHEAD_S = 4e-3   # per measurement: operand creation, syncs, Python
FIXED_S = 15.0      # CUDA init, library loading, nvidia-smi, peak tests, launch section
RESERVE_S = 5.0     # kept back from the budget for the final JSON and summary


# ---------------------------------------------------------------------------------------------- timing
class Timer:
    """Median per-call time over `batches` batches; each batch runs long enough (target_s) for the event
    resolution and the launch jitter not to matter, and at least min_reps calls."""

    def __init__(self, device, warmup=3, min_reps=5, target_s=20e-3, batches=3):
        self.cuda = device.type == "cuda"
        self.warmup, self.min_reps, self.target_s, self.batches = warmup, min_reps, target_s, batches

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def _batch(self, fn, reps):
        return loop_seconds(fn, reps, self.cuda)

    def reps_for(self, t):
        return max(self.min_reps, min(100_000, math.ceil(self.target_s / max(t, 1e-7))))

    def __call__(self, fn):
        for _ in range(self.warmup - 1):
            fn()
        self.sync()
        reps = self.reps_for(self._batch(fn, 1))  # the last warm-up call, timed to size the batches
        return statistics.median(self._batch(fn, reps) / reps for _ in range(self.batches))

    def cost(self, t):
        """Estimated wall seconds of one measurement of a call that takes t seconds."""
        t = max(t, FLOOR_S)
        return (self.warmup + self.batches * self.reps_for(t)) * t + OVERHEAD_S


class Budget:
    """Section i may run until now + (time left) * est_i / (estimates of i and every later section), so an
    overrunning section is cut short instead of starving the ones after it, and time saved is passed on."""

    def __init__(self, total_s):
        self.t0 = time.perf_counter()
        self.deadline = self.t0 + total_s - RESERVE_S
        self.section_end = self.deadline

    def elapsed(self):
        return time.perf_counter() - self.t0

    def start_section(self, est, est_rest):
        now = time.perf_counter()
        self.section_end = now + max(0.0, self.deadline - now) * est / max(est_rest, 1e-9)

    def ok(self):
        return time.perf_counter() < self.section_end


def randn(*shape, dtype, device, requires_grad=False):
    # Random normal data: zeros would let the hardware skip work and the clocks run cooler.
    return torch.randn(*shape, dtype=dtype, device=device, requires_grad=requires_grad)


def esize(dtype_name):
    return torch.empty((), dtype=DTYPES[dtype_name]).element_size()


# ---------------------------------------------------------------------------------------------- GEMMs
def add_layer(jobs, set_, tag, m, linears):
    """One transformer layer's linears in their three forms. Record m, n, k are the GEMM's own output rows,
    output columns and reduction; layout names the operands' transposition (row-major storage)."""
    for name, n_out, k_in in linears:
        jobs.append(dict(set=set_, tag=f"{tag} {name} fwd", m=m, n=n_out, k=k_in, layout="nt"))   # y = x W^T
        jobs.append(dict(set=set_, tag=f"{tag} {name} dgrad", m=m, n=k_in, k=n_out, layout="nn"))  # dx = dy W
        jobs.append(dict(set=set_, tag=f"{tag} {name} wgrad", m=n_out, n=k_in, k=m, layout="tn"))  # dW = dy^T x


def gpt_linears(h, t):
    return [("qkv", 3 * h // t, h), ("proj", h, h // t), ("fc1", 4 * h // t, h), ("fc2", h, 4 * h // t)]


def llama_linears(h, ffn, t):  # GQA with kv heads = heads/4; gate and up projections fused (Megatron)
    return [("qkv", (h + 2 * h // 4) // t, h), ("proj", h, h // t), ("fc1", 2 * ffn // t, h),
            ("fc2", h, ffn // t)]


def gemm_jobs():
    """Every GEMM set, keyed "a".."g"; dtype bf16 unless said, batch 1 unless said."""
    sets = {}
    # a. Transformer layers. The full grid (~1500 GEMMs) would take ~2.5 min, so keep the (h, t, m) combos
    #    with (ih + it + im) % 3 == 0: a Latin-square-like third that still pairs every h with every t and
    #    every m. Combos are shuffled (fixed seed) so a budget cut drops a random subset, not all big ones.
    hs, ts, ms = [1024, 2048, 2560, 4096, 5120, 8192, 12288, 16384, 20480], [1, 2, 4, 8], [1024, 4096, 16384]
    combos = [("gpt", h, None, t, m) for ih, h in enumerate(hs) for it, t in enumerate(ts) for im, m in enumerate(ms)
              if h // t >= 256 and (ih + it + im) % 3 == 0]
    combos += [("llama", h, f, t, m) for ih, (h, f) in enumerate([(4096, 14336), (8192, 28672)])
               for it, t in enumerate(ts) for im, m in enumerate(ms) if (ih + it + im) % 3 == 0]
    random.Random(0).shuffle(combos)
    a = []
    for model, h, ffn, t, m in combos:
        lin = gpt_linears(h, t) if model == "gpt" else llama_linears(h, ffn, t)
        add_layer(a, "a", f"{model} h={h} t={t} m={m}", m, lin)
    sets["a"] = a
    # b. Tile boundaries, m = k = 4096 (n sweep) and n = k = 4096 (m sweep): the 128 +-1 points first, then
    #    the step-1 fill between 1024 and 1280.
    coarse = sorted({128 * j + d for j in range(8, 25) for d in (-1, 0, 1)})
    fine = [v for v in range(1024, 1281) if v not in coarse]
    sets["b"] = [dict(set="b", tag=f"{w} sweep", layout="nt", k=4096,
                      m=4096 if w == "n" else v, n=v if w == "n" else 4096)
                 for v in coarse + fine for w in ("n", "m")]
    # c. Waves: the 128x128 output tile count crosses multiples of the SM count (132 on H200).
    c = [dict(set="c", tag=f"tiles={T}", m=128 * T, n=128, k=4096, layout="nt") for T in range(100, 301, 4)]
    for i in (8, 12, 16):
        c += [dict(set="c", tag=f"tiles={i * j}", m=128 * i, n=128 * j, k=4096, layout="nt")
              for j in range(1, 60) if 120 <= i * j <= 400]
    sets["c"] = c
    # d. Alignment of the reduction (k) and output (n) dims, m = 8192, in both forward and dgrad layouts.
    odd = [4096, 4095, 4094, 4092, 4088, 4080, 4064, 4104]
    sets["d"] = [dict(set="d", tag=f"{w}={v}", m=8192, n=v if w == "n" else 4096, k=v if w == "k" else 4096, layout=lay)
                 for w in ("k", "n") for v in odd if not (w == "n" and v == 4096) for lay in ("nt", "nn")]
    # e. Small m (decode-like, tiny micro-batches): launch- and weight-bandwidth-bound.
    sets["e"] = [dict(set="e", tag="small", m=m, n=nk, k=nk, layout="nt")
                 for m in (1, 8, 32, 64, 128, 256, 512) for nk in (1024, 4096, 8192)]
    # f. Unfused attention's batched GEMMs (Megatron baddbmm/bmm), batch = b*heads = 64.
    sets["f"] = [dict(set="f", tag=f"{name} s={s} d={d}", m=s, n=n, k=k, batch=64, layout=lay)
                 for s in (1024, 2048, 4096) for d in (64, 80, 96, 112, 128, 160, 192, 224, 256)
                 for name, n, k, lay in (("scores", s, d, "nt"), ("context", d, s, "nn"))]
    # g. f32 with TF32 off: a layer subset and a few tile/wave points.
    g = []
    for h in (1024, 4096, 8192):
        add_layer(g, "g", f"gpt h={h} t=1 m=4096", 4096, gpt_linears(h, 1))
    g += [dict(set="g", tag="n sweep", m=4096, n=n, k=4096, layout="nt") for n in (1024, 1025, 1151, 1152, 1153, 1280)]
    g += [dict(set="g", tag=f"tiles={T}", m=128 * T, n=128, k=4096, layout="nt") for T in (128, 132, 136, 264, 268)]
    for j in g:
        j["dtype"] = "float32"
    sets["g"] = g
    for name, jobs in sets.items():  # fill defaults, drop duplicates within a set
        seen, uniq = set(), []
        for j in jobs:
            j.setdefault("dtype", "bfloat16")
            j.setdefault("batch", 1)
            key = (j["m"], j["n"], j["k"], j["batch"], j["dtype"], j["layout"])
            if key not in seen:
                seen.add(key)
                uniq.append(j)
        sets[name] = uniq
    return sets


def gemm_flops(j):
    return 2 * j["m"] * j["n"] * j["k"] * j["batch"]


def gemm_est(j):
    byts = (j["m"] * j["k"] + j["k"] * j["n"] + j["m"] * j["n"]) * j["batch"] * esize(j["dtype"])
    return max(gemm_flops(j) / RATE[j["dtype"]], byts / RATE["hbm"])


def run_gemm(j, dev, timer, res):
    m, n, k, b, dt = j["m"], j["n"], j["k"], j["batch"], DTYPES[j["dtype"]]
    pre = (b,) if b > 1 else ()
    tr = lambda x: x.transpose(-1, -2)  # a view: cuBLAS gets a transpose flag, nothing is copied
    if j["layout"] == "nt":
        A, B = randn(*pre, m, k, dtype=dt, device=dev), tr(randn(*pre, n, k, dtype=dt, device=dev))
    elif j["layout"] == "nn":
        A, B = randn(*pre, m, k, dtype=dt, device=dev), randn(*pre, k, n, dtype=dt, device=dev)
    else:  # "tn"
        A, B = tr(randn(*pre, k, m, dtype=dt, device=dev)), randn(*pre, k, n, dtype=dt, device=dev)
    C = torch.empty(*pre, m, n, dtype=dt, device=dev)  # preallocated: out= keeps the allocator out of it
    fn = (lambda: torch.bmm(A, B, out=C)) if b > 1 else (lambda: torch.matmul(A, B, out=C))
    s = timer(fn)
    return [dict(j, seconds=s, tflops=gemm_flops(j) / s / 1e12)]


# ------------------------------------------------------------------------------------------ attention
def attention_jobs():
    # b*seq = 16384 tokens; heads*d in {2048, 4096}. Where d does not divide the width (d = 80, 96, 108, 120, 192)
    # heads is rounded instead of skipping, so those head sizes are measured too (recorded as is).
    jobs = []
    for s in (1024, 2048, 4096, 8192):
        for d in (64, 80, 96, 128, 192, 256):
            for width in (2048, 4096):
                heads = round(width / d)
                jobs.append(dict(batch=16384 // s, heads=heads, kv_heads=heads, seq=s, head_dim=d))
                if d == 128:  # GQA, kv heads = heads/4
                    jobs.append(dict(batch=16384 // s, heads=heads, kv_heads=heads // 4, seq=s, head_dim=d))
    # Head sizes off the kernels' multiples of 32 (and of 8, for 108) that real layouts use; fewer lengths.
    for s in (2048, 4096):
        for d in (108, 120):
            for width in (2048, 4096):
                heads = round(width / d)
                jobs.append(dict(batch=16384 // s, heads=heads, kv_heads=heads, seq=s, head_dim=d))
    random.Random(1).shuffle(jobs)
    return jobs


def attn_flops(j):  # causal forward: the lower triangle of QK^T and PV
    return 4 * j["batch"] * j["heads"] * j["seq"] ** 2 * j["head_dim"] / 2


def attention_est(j, timer):
    f = attn_flops(j)
    fwd, bwd = f / RATE["attn_fwd"], 2.5 * f / RATE["attn_bwd"]
    return 2 * (timer.cost(fwd) + timer.cost(bwd) + fwd)  # two backends; one untimed forward each


def run_attention(j, dev, timer, res):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    b, h, hk, s, d = j["batch"], j["heads"], j["kv_heads"], j["seq"], j["head_dim"]
    q = randn(b, h, s, d, dtype=torch.bfloat16, device=dev, requires_grad=True)
    k = randn(b, hk, s, d, dtype=torch.bfloat16, device=dev, requires_grad=True)
    v = randn(b, hk, s, d, dtype=torch.bfloat16, device=dev, requires_grad=True)
    # GQA: enable_gqa where the backend takes it; else kv heads expanded beforehand (not timed), as
    # Megatron does, recorded as gqa="repeat_kv".
    variants = [("enable_gqa", (k, v), {"enable_gqa": True})] if hk != h else [("none", (k, v), {})]
    if hk != h:
        rep = lambda x: x.detach().repeat_interleave(h // hk, dim=1).requires_grad_()
        variants.append(("repeat_kv", (rep(k), rep(v)), {}))
    out = []
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        errors = []
        for gqa, (kk, vv), kw in variants:
            try:
                with sdpa_kernel([backend]):  # forced: an error means this backend cannot run the shape
                    fwd = lambda: F.scaled_dot_product_attention(q, kk, vv, is_causal=True, **kw)
                    tf = timer(fwd)  # with grad enabled, as in training (saves the softmax statistics)
                    o = fwd()
                    g = torch.randn_like(o)
                    tb = timer(lambda: torch.autograd.grad(o, (q, kk, vv), g, retain_graph=True))
            except Exception as e:
                errors.append(f"{name}/{gqa}: {type(e).__name__}: {str(e)[:160]}")
                continue
            base = dict(j, dtype="bfloat16", causal=True, backend=name, gqa=gqa)
            out.append(dict(base, **{"pass": "forward", "seconds": tf, "flops": attn_flops(j)}))
            out.append(dict(base, **{"pass": "backward", "seconds": tb, "flops": 2.5 * attn_flops(j)}))
            break
        if errors:
            res["skipped"].append(dict(section="attention", reason="; ".join(errors), count=1, job=j))
    return out


# ---------------------------------------------------------------------------------------- memory ops
def memory_jobs(shift=0):
    sizes = [2 ** e >> shift for e in (20, 22, 24, 26, 28)]
    jobs = [dict(op=op, elements=n, dtype=dt) for op in ("copy", "add", "gelu", "layer_norm", "rms_norm", "softmax")
            for dt in ("bfloat16", "float32") for n in sizes]
    rows = 8192 >> shift
    jobs += [dict(op="cross_entropy", elements=rows * (v >> shift), rows=rows, vocab=v >> shift, dtype="bfloat16")
             for v in (50304, 128256)]
    jobs += [dict(op="adamw_fused", elements=n, dtype="float32") for n in sizes]
    return jobs


def mem_traffic(j):
    """(ideal HBM bytes read + written per call, bytes resident). Ideal = each input read once and each
    output written once (a fused kernel); norm weights and row statistics are left out."""
    n, es = j["elements"], esize(j["dtype"])
    per_elem = {"copy": 2, "add": 3, "gelu": 2, "layer_norm": 2, "rms_norm": 2, "softmax": 2,
                "cross_entropy": 3,  # forward reads logits; backward reads them and writes the gradient
                "adamw_fused": 7}    # reads param, grad, m, v; writes param, m, v (all f32)
    resident = {"add": 3, "cross_entropy": 3, "adamw_fused": 4}.get(j["op"], 2)
    return per_elem[j["op"]] * n * es, resident * n * es


def run_memory(j, dev, timer, res):
    n, dt, op = j["elements"], DTYPES[j["dtype"]], j["op"]
    byts, resident = mem_traffic(j)
    if resident > 4 * 2 ** 30:
        res["skipped"].append(dict(section="memory_ops", reason="over 4 GiB", count=1, job=j))
        return []
    x = randn(n, dtype=dt, device=dev)
    rec = dict(j)
    if op == "copy":
        y = torch.empty_like(x)
        fn = lambda: y.copy_(x)
    elif op == "add":
        y, z = randn(n, dtype=dt, device=dev), torch.empty_like(x)
        fn = lambda: torch.add(x, y, out=z)
    elif op == "gelu":
        y = torch.empty_like(x)
        fn = lambda: torch.ops.aten.gelu.out(x, approximate="tanh", out=y)
    elif op in ("layer_norm", "rms_norm"):
        x2, w, bias = x.view(-1, 4096), randn(4096, dtype=dt, device=dev), randn(4096, dtype=dt, device=dev)
        rec["row"] = 4096
        fn = ((lambda: F.layer_norm(x2, (4096,), w, bias, 1e-5)) if op == "layer_norm"
              else (lambda: F.rms_norm(x2, (4096,), w, 1e-5)))
    elif op == "softmax":
        x2 = x.view(-1, 2048)
        rec["row"] = 2048
        fn = lambda: torch.softmax(x2, -1)
    elif op == "cross_entropy":
        logits = x.view(j["rows"], j["vocab"]).requires_grad_()
        tgt = torch.randint(0, j["vocab"], (j["rows"],), device=dev)
        fn = lambda: torch.autograd.grad(F.cross_entropy(logits, tgt), logits)  # forward + backward
    else:  # adamw_fused: one f32 parameter of n elements
        p = torch.nn.Parameter(x)
        p.grad = randn(n, dtype=dt, device=dev)
        try:
            opt, rec["fused"] = torch.optim.AdamW([p], lr=1e-5, fused=True), True
        except Exception:  # (fused AdamW on the CPU needs a recent torch; the GPU always has it)
            opt, rec["fused"] = torch.optim.AdamW([p], lr=1e-5), False
        fn = opt.step
    s = timer(fn)
    return [dict(rec, bytes=byts, seconds=s, gbps=byts / s / 1e9)]


# ----------------------------------------------------------------------------------- device, peak, launch
def nvidia_smi():
    out = {}
    full = "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,power.draw,temperature.gpu"
    for key, fields in (("query", full), ("query_min", "clocks.sm,clocks.max.sm,clocks.mem,power.limit")):
        try:
            r = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv"],
                               capture_output=True, text=True, timeout=15)
            if r.returncode == 0:
                return {key: r.stdout.strip()}
            out[key + "_error"] = (r.stdout + r.stderr).strip()[:300]
        except Exception as e:  # no nvidia-smi (CPU smoke run) or it hangs: not fatal
            out[key + "_error"] = f"{type(e).__name__}: {e}"[:300]
    return out


def cublas_version():
    """cuBLAS's own version, read from the library torch has loaded (after the first matmul)."""
    try:
        path = next(l.split()[-1] for l in open("/proc/self/maps") if "/libcublas.so" in l)
        lib = ctypes.CDLL(path)
        v = [ctypes.c_int() for _ in range(3)]
        for i, x in enumerate(v):  # cublasGetProperty(MAJOR_VERSION=0 / MINOR=1 / PATCH=2)
            lib.cublasGetProperty(i, ctypes.byref(x))
        return {"version": ".".join(str(x.value) for x in v), "library": path}
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"[:200]}


def device_facts(dev):
    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
            "host": platform.node(), "type": dev.type,
            "allow_tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
            "allow_tf32_cudnn": torch.backends.cudnn.allow_tf32,
            "bf16_reduced_precision_reduction": torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction}
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        info.update(name=p.name, capability=f"{p.major}.{p.minor}", multi_processor_count=p.multi_processor_count,
                    total_memory=p.total_memory, l2_cache_size=getattr(p, "L2_cache_size", None),
                    cudnn=torch.backends.cudnn.version())
    else:
        info.update(name=platform.processor() or platform.machine(), threads=torch.get_num_threads())
    info["nvidia_smi_start"] = nvidia_smi()
    return info


def peak(dev, timer, smoke):
    n = 256 if smoke else 8192
    a, b = randn(n, n, dtype=torch.bfloat16, device=dev), randn(n, n, dtype=torch.bfloat16, device=dev)
    c = torch.empty_like(a)
    s = timer(lambda: torch.matmul(a, b, out=c))
    e = 2 ** 20 if smoke else 2 ** 29  # 1 GiB of bf16 on the GPU: far beyond the 60 MB L2
    x, y = randn(e, dtype=torch.bfloat16, device=dev), torch.empty(e, dtype=torch.bfloat16, device=dev)
    t = timer(lambda: y.copy_(x))
    return {"matmul_bf16": {"n": n, "seconds": s, "tflops": 2 * n ** 3 / s / 1e12},
            "copy_bf16": {"elements": e, "bytes": 4 * e, "seconds": t, "gbps": 4 * e / t / 1e9}}


def launch(dev, timer, calls):
    x, y = randn(1, dtype=torch.float32, device=dev), torch.empty(1, device=dev)
    a = randn(8, 8, dtype=torch.bfloat16, device=dev)
    c = torch.empty_like(a)
    out = {"calls": calls}
    for name, fn in (("add_1_element", lambda: torch.add(x, x, out=y)),
                     ("matmul_8x8x8_bf16", lambda: torch.matmul(a, a, out=c))):
        for _ in range(10):
            fn()
        host, dev_t, synced = [], [], []
        for _ in range(3):
            timer.sync()
            t0 = time.perf_counter()
            dev_t.append(timer._batch(fn, calls) / calls)  # back-to-back: launch-bound throughput
            host.append((time.perf_counter() - t0) / calls)
            t0 = time.perf_counter()
            for _ in range(calls // 10):  # call + synchronize: the round-trip latency
                fn()
                timer.sync()
            synced.append((time.perf_counter() - t0) / (calls // 10))
        out[name] = {"host_seconds_per_call": statistics.median(host),
                     "device_loop_seconds_per_call": statistics.median(dev_t),
                     "synchronized_seconds_per_call": statistics.median(synced)}
    return out


# --------------------------------------------------------------------------------------------- main
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=240.0)
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU, few reps (tests the script)")
    args = ap.parse_args()

    budget = Budget(args.budget_s)
    # TF32 off: f32 GEMMs must be measured as true f32.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    if args.smoke:
        dev = torch.device("cpu")
        timer = Timer(dev, warmup=3, min_reps=2, target_s=1e-3, batches=3)
    else:
        if not torch.cuda.is_available():
            sys.exit("no CUDA device (use --smoke to test on the CPU)")
        dev = torch.device("cuda")
        timer = Timer(dev)
    gpu_timer = Timer(torch.device("cpu"))  # GPU timing parameters, for the estimate only

    # Full GPU job lists, always: the estimate is printed for them (also in the smoke run).
    g = gemm_jobs()
    units = [("launch", None, None), ("gemm_a", g["a"], run_gemm), ("memory_ops", memory_jobs(), run_memory),
             ("attention", attention_jobs(), run_attention), ("gemm_e", g["e"], run_gemm), ("gemm_d", g["d"], run_gemm),
             ("gemm_c", g["c"], run_gemm), ("gemm_b", g["b"], run_gemm), ("gemm_f", g["f"], run_gemm),
             ("gemm_g", g["g"], run_gemm)]
    def est_one(name, j):
        if name.startswith("gemm"):
            return gpu_timer.cost(gemm_est(j))
        if name == "attention":
            return attention_est(j, gpu_timer)
        return gpu_timer.cost(mem_traffic(j)[0] / RATE["hbm"])
    est = {name: (1.0 if jobs is None else sum(est_one(name, j) for j in jobs)) for name, jobs, _ in units}
    total_est = FIXED_S + sum(est.values())
    print(f"estimated H200 run time: {total_est:.0f} s (budget {args.budget_s:.0f} s)")
    for name, jobs, _ in units:
        print(f"  {name:11s} {0 if jobs is None else len(jobs):5d} jobs  ~{est[name]:6.1f} s")

    if args.smoke:  # the same code on tiny shapes: a few jobs per unit, dims divided by 64
        def tiny(name, j):
            j = dict(j)
            if name.startswith("gemm"):
                for key in ("m", "n", "k"):
                    j[key] = max(1, j[key] // 64)
                j["batch"] = min(j["batch"], 2)
            elif name == "attention":
                heads = min(j["heads"], 8)
                j.update(batch=1, seq=j["seq"] // 64, heads=heads, kv_heads=heads * j["kv_heads"] // j["heads"])
            return j
        def sample(name, jobs):
            if name == "memory_ops":  # every op and dtype, at the smallest size
                small, seen = [], set()
                for j in memory_jobs(shift=8):
                    if (j["op"], j["dtype"]) not in seen:
                        seen.add((j["op"], j["dtype"]))
                        small.append(j)
                return small
            picked = jobs[::max(1, len(jobs) // 5) | 1]  # odd stride: alternates layouts in b, d, f
            if name == "attention":  # make sure the grouped-query path runs
                picked.append(next(j for j in jobs if j["kv_heads"] != j["heads"]))
            return [tiny(name, j) for j in picked]
        units = [(name, None if jobs is None else sample(name, jobs), fn) for name, jobs, fn in units]

    res = {"schema": SCHEMA, "device": device_facts(dev), "gemm": [], "attention": [], "memory_ops": [],
           "launch": {}, "skipped": [], "elapsed_s": None,
           "method": {"warmup": timer.warmup, "min_reps": timer.min_reps, "target_batch_s": timer.target_s,
                      "batches": timer.batches, "statistic": "median of per-call batch means",
                      "clock": "cuda events" if timer.cuda else "perf_counter", "smoke": args.smoke,
                      "budget_s": args.budget_s, "estimate_s": round(total_est, 1)}}

    def save():
        res["elapsed_s"] = round(budget.elapsed(), 2)
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(res, f, indent=1)
        os.replace(tmp, args.out)

    res["device"]["peak"] = peak(dev, timer, args.smoke)
    if dev.type == "cuda":
        res["device"]["cublas"] = cublas_version()
    save()

    est_rest = sum(est.values())
    for name, jobs, fn in units:
        budget.start_section(est[name], est_rest)
        est_rest -= est[name]
        t0 = time.perf_counter()
        if jobs is None:  # launch overhead: a few tens of ms
            res["launch"] = launch(dev, timer, 100 if args.smoke else 1000)
        else:
            section = "gemm" if name.startswith("gemm") else name
            for i, j in enumerate(jobs):
                if budget.elapsed() > args.budget_s - RESERVE_S or not budget.ok():
                    res["skipped"].append(dict(section=name, reason="over budget", count=len(jobs) - i,
                                               elapsed_s=round(budget.elapsed(), 1)))
                    break
                try:
                    res[section] += fn(j, dev, timer, res)
                except Exception as e:  # one bad shape (OOM, unsupported) must not end the run
                    res["skipped"].append(dict(section=name, reason=f"error: {type(e).__name__}: {str(e)[:160]}",
                                               count=1, job=j))
                    if dev.type == "cuda":
                        torch.cuda.empty_cache()
        if dev.type == "cuda":
            torch.cuda.empty_cache()  # shapes differ a lot between sections: return cached blocks
        print(f"  done {name:11s} in {time.perf_counter() - t0:6.1f} s (elapsed {budget.elapsed():6.1f} s)", flush=True)
        save()

    res["device"]["nvidia_smi_end"] = nvidia_smi() if dev.type == "cuda" else {}
    save()
    pk = res["device"]["peak"]
    counts = {s: len(res[s]) for s in ("gemm", "attention", "memory_ops")}
    per_set = {}
    for r in res["gemm"]:
        per_set[r["set"]] = per_set.get(r["set"], 0) + 1
    print(f"device: {res['device']['name']} | torch {torch.__version__} cuda {torch.version.cuda}")
    print(f"peak bf16 matmul {pk['matmul_bf16']['n']}^3: {pk['matmul_bf16']['tflops']:.1f} TFLOP/s | "
          f"copy: {pk['copy_bf16']['gbps']:.1f} GB/s (read + written)")
    print(f"records: {counts} gemm sets {dict(sorted(per_set.items()))} | "
          f"skipped entries {len(res['skipped'])} ({sum(s['count'] for s in res['skipped'])} jobs)")
    print(f"launch: add {res['launch']['add_1_element']['host_seconds_per_call'] * 1e6:.1f} us/call, "
          f"matmul 8^3 {res['launch']['matmul_8x8x8_bf16']['host_seconds_per_call'] * 1e6:.1f} us/call")
    print(f"elapsed {res['elapsed_s']:.1f} s (estimate for the GPU run {total_est:.0f} s) -> {args.out}")


if __name__ == "__main__":
    main()
