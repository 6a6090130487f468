#!/usr/bin/python3
"""Training throughput: Strata's `cpu` backend against PyTorch, fp32 and bf16,
on this machine, in one run, at one thread count, with model-FLOPs utilisation
(MFU) against the GEMM peak measured in the same run.

For each model in configs/bench/ (GPT-2 small at 1024 tokens, a small 6-layer
GPT-2 at 256, the small LLaMA at 256, a SmolLM-135M-shaped LLaMA at 512, the
small Mixtral at 256: 8 experts, top-2) and each repeat, it runs in turn, for
fp32 and then bf16:
  - Strata: `strata train CONFIG` (tokens_per_s from its metrics.jsonl);
  - current PyTorch (PyPI, in a virtual environment this script makes):
    bench/torch_current.py, written as users write it today (nn.Module,
    scaled_dot_product_attention, fused AdamW, torch.compile, bf16 autocast);
    Mixtral twice: transformers' sparse MoE block as it loops over the experts,
    and its grouped_mm form (`torch grouped`); the ratio is against the faster;
  - Debian's PyTorch 1.13 (secondary; GPT-2 and Mixtral models): tests/golden/torch_gpt2.py, and
    tests/golden/torch_moe.py's Mixtral through bench/torch_golden_moe.py.
Every engine runs under the same environment: the OpenMP build of OpenBLAS,
the machine's OpenBLAS core overrides removed, glibc malloc kept from
returning memory to the kernel (see ../shared/README.md), the thread count.
Each run reports the median tokens/s over its steps after the first `--warmup`
(PyTorch's compilation falls in those); the summary gives the median over repeats.

strata-gemm-peak runs before the first and after the last training run; the
best fp32 and bf16 GFLOP/s over both runs and all its shapes are the peaks. A
warning follows them when the host's load average was 1 or more before the first
(other work running: the peaks and the MFU column come out low).
Model FLOPs per token (PaLM / Megatron convention, causal mask not discounted):
    6 * N + 12 * L * T * (H * D)
with N the weight matrices a token passes through: per layer GPT-2's 12 C^2,
LLaMA's q/k/v/o and three SwiGLU matrices (Mixtral: the router's E*C and the
three matrices of each of the k experts a token is routed to, not all E),
plus the LM head (counted once when tied); biases, norms and position
embeddings left out. MFU = tokens/s * FLOPs per token / peak FLOP/s.

Usage: /usr/bin/python3 bench/train_throughput.py [--threads N] [--repeats R]
       [--models small,gpt2_small,llama_small,smollm_135m,mixtral_small] [--precisions fp32,bf16]
       [--strata build/bin/strata] [--gemm-peak build/bin/strata-gemm-peak]
       [--torch-venv DIR] [--no-debian-torch] [--json PATH]
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import tomllib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_GPT2 = os.path.join(REPO, "tests", "golden", "torch_gpt2.py")
TORCH_CURRENT = os.path.join(REPO, "bench", "torch_current.py")
TORCH_GOLDEN_MOE = os.path.join(REPO, "bench", "torch_golden_moe.py")
PYTHON = "/usr/bin/python3"  # Debian's python3-torch is importable only from this interpreter
DEFAULT_TORCH_VENV = "/var/tmp/strata-bench-torch"
OPENMP_OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-openmp"
MALLOC_KEEP_MEMORY = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"
FLOPS_FORMULA = ("6*N + 12*L*T*(H*D) per token, N = the weight matrices (GPT-2 12*L*C^2, LLaMA L*(2*C*H*D + "
                 "2*C*KV*D + 3*C*F), Mixtral's active ones L*(2*C*H*D + 2*C*KV*D + E*C + k*3*C*F)) + V*C for the "
                 "head (tied: once)")

# The issues' targets: (label, the model summary's figure or None when not measured, required minimum, models).
DENSE_MODELS = {"small", "gpt2_small", "llama_small", "smollm_135m"}
TARGETS = [
    ("15: Strata fp32 >= 1.5x current PyTorch fp32", lambda m: m["ratio"].get("fp32"), 1.5, DENSE_MODELS),
    ("15: Strata bf16 >= 1.3x current PyTorch bf16", lambda m: m["ratio"].get("bf16"), 1.3, DENSE_MODELS),
    ("15: Strata bf16 MFU >= 75% of measured bf16 peak", lambda m: m["mfu_bf16_peak"].get("strata bf16"), 0.75,
     {"smollm_135m"}),
    ("37: Strata fp32 >= 1.3x current PyTorch fp32", lambda m: m["ratio"].get("fp32"), 1.3, {"mixtral_small"}),
    ("37: Strata bf16 >= 1.3x current PyTorch bf16", lambda m: m["ratio"].get("bf16"), 1.3, {"mixtral_small"}),
    ("40: Strata bf16 >= 1.8x current PyTorch bf16", lambda m: m["ratio"].get("bf16"), 1.8, {"small", "smollm_135m"}),
    ("40: Strata bf16 MFU >= 60% of measured bf16 peak", lambda m: m["mfu_bf16_peak"].get("strata bf16"), 0.60,
     {"small", "smollm_135m"}),
    ("40: Strata fp32 >= 1.25x current PyTorch fp32", lambda m: m["ratio"].get("fp32"), 1.25, {"small", "gpt2_small"}),
    ("40: Strata fp32 MFU >= 80% of measured fp32 peak", lambda m: m["mfu_fp32_peak"].get("strata fp32"), 0.80,
     {"small", "gpt2_small"}),
]


def tuned_env(threads):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    env.update(LD_LIBRARY_PATH=OPENMP_OPENBLAS, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               GLIBC_TUNABLES=MALLOC_KEEP_MEMORY)
    return env


def load_average():
    """The 1-minute load average: other work on the machine skews a run."""
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def median_after_warmup(rates, warmup):
    measured = rates[warmup:] if len(rates) > warmup else rates
    return statistics.median(measured)


def write_json_atomic(path, document):
    temp = f"{path}.tmp{os.getpid()}"
    with open(temp, "w") as f:
        json.dump(document, f, indent=1)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)


# ------------------------------------------------------------------ engines

def run_strata(args, name, model, precision, steps, work_dir, strata=None):
    run_dir = os.path.join(work_dir, f"strata-{name}-{precision}")
    shutil.rmtree(run_dir, ignore_errors=True)
    command = [strata or args.strata, "train", model["path"], "--set", f"train.steps={steps}",
               "--set", f"ops.threads={args.threads}", "--set", f"checkpoint.dir={run_dir}",
               "--set", f"precision.compute={precision}"]
    done = subprocess.run(command, cwd=REPO, env=tuned_env(args.threads), capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"strata failed ({' '.join(command)}):\n{done.stdout}{done.stderr}")
    arena = re.search(r"arena ([0-9.]+) MiB", done.stdout)
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        rates = [json.loads(line)["tokens_per_s"] for line in f if line.strip()]
    shutil.rmtree(run_dir, ignore_errors=True)  # the final checkpoint is not needed
    # Before the steps Strata prints its precision and any op the backend cannot run natively;
    # after them, that every op ran natively or its fallback summary.
    lines = [line.strip() for line in done.stdout.rstrip().splitlines()]
    last_step = max((i for i, line in enumerate(lines) if line.startswith("step ")), default=-1)
    before = [line for line in lines[:last_step] if line.startswith("backend '")]
    summary = " | ".join(before + lines[last_step + 1:])
    return {"tokens_per_s": median_after_warmup(rates, args.warmup), "steps": rates,
            "arena_mib": float(arena.group(1)) if arena else None, "note": summary,
            "precision_line": next((line for line in lines if line.startswith("precision:")), None),
            "command": command}


def run_python(command, what):
    done = subprocess.run(command, cwd=REPO, env=tuned_env(int(command[command.index("--threads") + 1])),
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{what} failed ({' '.join(command)}):\n{done.stdout}{done.stderr}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["command"] = command
    return result


def run_torch_current(args, model, precision, steps, moe="loop"):
    """Current PyTorch (the venv's), as users write it today: bench/torch_current.py."""
    result = run_python([args.torch_python, TORCH_CURRENT, "--config", model["path"], "--steps", str(steps),
                         "--warmup", str(args.torch_warmup), "--threads", str(args.threads), "--precision", precision,
                         "--moe", moe], "current torch")
    experts = f", experts {'looped' if moe == 'loop' else 'by torch._grouped_mm'}" if "num_experts" in model else ""
    result["note"] = f"torch {result['torch']}, torch.compile, fused AdamW, SDPA{experts}"
    return result


def run_torch_debian(args, model, precision, steps):
    """Debian's 1.13 with the golden tests' GPT-2 (tests/golden/torch_gpt2.py) or Mixtral (torch_moe.py)."""
    if model["family"] == "mixtral":
        result = run_python([PYTHON, TORCH_GOLDEN_MOE, "--config", model["path"], "--steps", str(steps), "--warmup",
                             str(args.warmup), "--threads", str(args.threads), "--precision", precision], "Debian torch")
        result["note"] = f"torch {result['torch']}, the golden tests' eager Mixtral, {result['blas']}"
        return result
    result = run_python([PYTHON, TORCH_GPT2, "--n-layer", str(model["n_layer"]), "--n-head", str(model["n_head"]),
                         "--n-embd", str(model["n_embd"]), "--vocab-size", str(model["vocab_size"]),
                         "--seq", str(model["block_size"]), "--batch", str(model["batch_size"]), "--steps", str(steps),
                         "--warmup", str(args.warmup), "--data", model["data_dir"], "--threads", str(args.threads),
                         "--precision", precision], "Debian torch")
    result["note"] = f"torch {result['torch']}, {result['blas']}"
    return result


def engines_for(args, model):
    """(label, runner), in the order each repeat runs them for `model`."""
    engines = []
    for precision in args.precisions:
        engines.append((f"strata {precision}", lambda steps, work, p=precision: run_strata(
            args, model["name"], model, p, steps, work)))
        if args.strata_before:
            engines.append((f"strata before {precision}", lambda steps, work, p=precision: run_strata(
                args, model["name"], model, p, steps, work, args.strata_before)))
        engines.append((f"torch {precision}", lambda steps, work, p=precision: run_torch_current(
            args, model, p, steps)))
        if "num_experts" in model:
            engines.append((f"torch grouped {precision}", lambda steps, work, p=precision: run_torch_current(
                args, model, p, steps, "grouped")))
        if model["family"] in ("gpt2", "mixtral") and not args.no_debian_torch:
            engines.append((f"torch 1.13 {precision}", lambda steps, work, p=precision: run_torch_debian(
                args, model, p, steps)))
    return engines


def ensure_torch_venv(args):
    """A virtual environment with PyPI's current torch (made once; reused while it imports)."""
    python = os.path.join(args.torch_venv, "bin", "python")
    probe = [python, "-c", "import torch, numpy; print(torch.__version__)"]
    if os.path.exists(python) and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    print(f"making {args.torch_venv}: python3 -m venv, pip install torch numpy (a few GB)", flush=True)
    made = subprocess.run([PYTHON, "-m", "venv", args.torch_venv], capture_output=True, text=True)
    if made.returncode != 0:
        sys.exit(f"python3 -m venv {args.torch_venv} failed (apt-get install python3-venv):\n{made.stderr}")
    subprocess.run([python, "-m", "pip", "install", "-q", "torch", "numpy"], check=True)
    if not os.path.exists("/usr/include/python3.11/Python.h"):
        sys.exit("torch.compile builds C++ against Python's headers: apt-get install python3-dev")
    return python


# --------------------------------------------------------------- GEMM peak

def peak_shapes(models):
    """Besides strata-gemm-peak's square sizes: each model's largest GEMM (the
    MLP's first projection, rows B*T, columns its hidden width, depth C; for a
    mixture of experts one expert's share of the rows, B*T*k/E)."""
    shapes = {(m["batch_size"] * m["block_size"] * m["active_mlps"] // m["mlp_count"], m["mlp_width"], m["n_embd"])
              for m in models.values()}
    return ";".join(f"{m},{n},{k}" for m, n, k in sorted(shapes))


def measure_gemm_peak(args, shapes):
    command = [args.gemm_peak, "--threads", str(args.threads), "--seconds", str(args.peak_seconds),
               "--shapes", shapes, "--json"]
    load_before = load_average()
    done = subprocess.run(command, cwd=REPO, env=tuned_env(args.threads), capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"strata-gemm-peak failed ({' '.join(command)}):\n{done.stdout}{done.stderr}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["kernels"] = done.stderr.strip().splitlines()  # which oneDNN implementation ran the bf16 shapes
    result["load"] = [load_before, load_average()]
    return result


def busy_host_warning(gemm, threads):
    """A warning when other work was running as the first peak was measured (the 1-minute load average before it,
    when nothing of this benchmark runs, at 1 or more): the peaks, and so the MFU column, come out low."""
    before = float(gemm["start"]["load"][0])
    if before < 1.0:
        return None
    return (f"WARNING: the host's load average was {before:.2f} before the first GEMM peak measurement ({threads} "
            f"threads): other work is running, so the peaks and the MFU figures are likely low")


def best_peak(measurements, dtype):
    """The highest GFLOP/s of `dtype` over every run and shape, with where it came from; None where oneDNN made
    no GEMM of that dtype (bf16 on a CPU without AVX-512)."""
    key = f"{dtype}_gflops"
    best = max(((shape[key], run, shape) for run, m in measurements.items() for shape in m["shapes"]
                if shape[key] is not None), key=lambda entry: entry[0], default=None)
    if best is None:
        return None
    gflops, run, shape = best
    return {"gflops": gflops, "run": run, "m": shape["m"], "n": shape["n"], "k": shape["k"]}


# ------------------------------------------------------------------ models

def model_flops_per_token(model):
    layers, c, vocab, seq = model["n_layer"], model["n_embd"], model["vocab_size"], model["block_size"]
    heads = model["n_head"]
    if model["family"] in ("llama", "mixtral"):
        kv_heads, d = model.get("n_kv_head", heads), model.get("head_dim", c // heads)
        per_layer = 2 * c * heads * d + 2 * c * kv_heads * d + 3 * c * model["mlp_width"] * model["active_mlps"]
        if model["family"] == "mixtral":
            per_layer += model["num_experts"] * c  # the router
        head = vocab * c * (1 if model.get("tie_word_embeddings", True) else 2)
    else:
        d, per_layer, head = c // heads, 12 * c * c, vocab * c
    matrix_params = layers * per_layer + head
    attention = 12 * layers * seq * heads * d
    return {"matrix_params": matrix_params, "dense_flops": 6 * matrix_params, "attention_flops": attention,
            "flops_per_token": 6 * matrix_params + attention}


def ensure_corpus(args, data_dir):
    if os.path.exists(os.path.join(REPO, data_dir, "meta.json")):
        return
    text = os.path.join(REPO, "data", "kjv.txt")
    if not os.path.exists(text):
        subprocess.run(["bash", os.path.join(REPO, "scripts", "default_corpus.sh"), text], check=True)
    subprocess.run([args.strata, "data", "prepare", text, "--out", os.path.join(REPO, data_dir),
                    "--vocab-size", "4096"], check=True)


def load_model(name):
    path = os.path.join(REPO, "configs", "bench", f"{name}.toml")
    with open(path, "rb") as f:
        config = tomllib.load(f)
    model = dict(config["model"])
    model.setdefault("family", "gpt2")
    model.update(name=name, path=path, data_dir=config["data"]["dir"], batch_size=config["train"]["batch_size"],
                 steps=config["train"]["steps"],
                 mlp_width=model.get("moe_intermediate_size", model.get("intermediate_size", 4 * model["n_embd"])),
                 mlp_count=model.get("num_experts", 1), active_mlps=model.get("num_experts_per_tok", 1))
    if config["train"]["global_batch"] != model["batch_size"]:
        sys.exit(f"{path}: the benchmark expects global_batch == batch_size (no accumulation)")
    return model


# ----------------------------------------------------------------- summary

def current_torch_engine(median, precision):
    """The faster current-PyTorch engine at `precision` (for Mixtral: looped or grouped experts)."""
    engines = [e for e in (f"torch {precision}", f"torch grouped {precision}") if median.get(e)]
    return max(engines, key=lambda e: median[e], default=None)


def summarise(model, runs, peaks):
    """Medians over repeats, ratios and MFU for one model. `ratio_per_repeat`: the median over repeats of
    Strata's rate over the faster current PyTorch's in the same repeat (runs minutes apart, not hours)."""
    median = {engine: statistics.median(r["tokens_per_s"] for r in results) for engine, results in runs.items()}
    flops = model["flops"]["flops_per_token"]
    summary = {"median_tokens_per_s": median, "ratio": {}, "ratio_per_repeat": {}, "ratio_vs_debian": {},
               "over_before": {},
               "torch_engine": {},
               "mfu_fp32_peak": {engine: rate * flops / (peaks["fp32"]["gflops"] * 1e9) for engine, rate in median.items()},
               "mfu_bf16_peak": {engine: rate * flops / (peaks["bf16"]["gflops"] * 1e9)
                                 for engine, rate in median.items() if engine.endswith("bf16") and peaks["bf16"]},
               "strata_bf16_over_fp32": None}
    for precision in ("fp32", "bf16"):
        strata = median.get(f"strata {precision}")
        torch = current_torch_engine(median, precision)
        summary["torch_engine"][precision] = torch
        for key, engine in (("ratio", torch), ("ratio_vs_debian", f"torch 1.13 {precision}")):
            if strata and median.get(engine):
                summary[key][precision] = strata / median[engine]
        if strata and torch:
            repeats = zip(runs[f"strata {precision}"], *(runs[e] for e in runs if e.startswith("torch ") and
                                                        e.endswith(precision) and "1.13" not in e))
            summary["ratio_per_repeat"][precision] = statistics.median(
                s["tokens_per_s"] / max(t["tokens_per_s"] for t in torches) for s, *torches in repeats)
        if f"strata before {precision}" in runs:  # --strata-before: same-repeat ratios, median over repeats
            summary["over_before"][precision] = statistics.median(
                now["tokens_per_s"] / before["tokens_per_s"]
                for now, before in zip(runs[f"strata {precision}"], runs[f"strata before {precision}"]))
    if "strata fp32" in median and "strata bf16" in median:
        summary["strata_bf16_over_fp32"] = median["strata bf16"] / median["strata fp32"]
    return summary


def percent(value):
    return f"{100 * value:5.1f}%" if value is not None else "     -"


def rate(value):
    return f"{value:9.1f}" if value is not None else "        -"


def times(value):
    return f"{value:5.2f}x" if value is not None else "     -"


def print_summary(args, models, summaries, peaks, gemm):
    print(f"\nGEMM peak ({args.threads} threads, best of the runs before and after training, oneDNN):")
    for dtype in ("fp32", "bf16"):
        p = peaks[dtype]
        if p is None:
            print(f"  {dtype}: none (oneDNN made no {dtype} GEMM on this CPU; no MFU against it)")
            continue
        print(f"  {dtype}: {p['gflops']:.1f} GFLOP/s (M,N,K = {p['m']},{p['n']},{p['k']}; run at the {p['run']})")
    if warning := busy_host_warning(gemm, args.threads):
        print(f"  {warning}")
    print(f"model FLOPs: {FLOPS_FORMULA}")
    print("\nmedian tokens/s over repeats (each run: median over its steps after warm-up); ratio = Strata / current "
          "PyTorch (the faster form: Mixtral's experts looped or grouped), ratio/rep = median over repeats of the same "
          "repeat's ratio; MFU against the fp32 peak, and for bf16 also against the bf16 peak; Debian's 1.13 last")
    print(f"{'model':<13} {'prec':<4} {'strata':>9} {'torch':>9} {'ratio':>6} {'ratio/rep':>9} {'MFU strata':>10}"
          f" {'MFU torch':>10}"
          f" {'bf16-pk S':>10} {'bf16-pk T':>10} {'arena MiB':>10} {'torch1.13':>9} {'ratio':>6}")
    for name, model in models.items():
        s = summaries[name]
        median = s["median_tokens_per_s"]
        for precision in args.precisions:
            strata, torch = f"strata {precision}", s["torch_engine"][precision]
            arena = statistics.median(r["arena_mib"] for r in model["runs"][strata]) \
                if all(r["arena_mib"] is not None for r in model["runs"][strata]) else None
            print(f"{name:<13} {precision:<4} {rate(median[strata])} {rate(median[torch])} "
                  f"{times(s['ratio'].get(precision))} {times(s['ratio_per_repeat'].get(precision)):>9} "
                  f"{percent(s['mfu_fp32_peak'][strata]):>10} "
                  f"{percent(s['mfu_fp32_peak'][torch]):>10} {percent(s['mfu_bf16_peak'].get(strata)):>10} "
                  f"{percent(s['mfu_bf16_peak'].get(torch)):>10} {f'{arena:.1f}' if arena is not None else '-':>10} "
                  f"{rate(median.get(f'torch 1.13 {precision}'))} {times(s['ratio_vs_debian'].get(precision))}")
        print(f"{'':<13} {model['family']}, seq {model['block_size']}, batch {model['batch_size']}, "
              f"{model['flops']['flops_per_token'] / 1e6:.1f} MFLOP/token "
              f"(N = {model['flops']['matrix_params'] / 1e6:.2f}M); Strata bf16/fp32 {times(s['strata_bf16_over_fp32'])}")
        if s["over_before"]:
            print(f"{'':<13} Strata over --strata-before (same repeat, median): " +
                  ", ".join(f"{p} {times(r)} ({rate(median[f'strata before {p}']).strip()} tokens/s before)"
                            for p, r in s["over_before"].items()))
        for engine in model["runs"]:
            if engine.startswith("torch"):
                print(f"{'':<13} {engine} ran: {model['runs'][engine][0]['note']}; median {rate(median[engine])}")


def check_targets(models, summaries):
    results = []
    for name in models:
        for label, figure, required, only in TARGETS:
            measured = figure(summaries[name])
            if measured is None or name not in only:
                continue
            results.append({"model": name, "target": label, "measured": measured, "required": required,
                            "met": measured >= required})
    print("\ntargets (issue: target):")
    for t in results:
        shown = f"{100 * t['measured']:.1f}%" if "MFU" in t["target"] else f"{t['measured']:.2f}x"
        print(f"  {t['model']:<13} {t['target']:<50} {shown:>8}  {'met' if t['met'] else 'NOT met'}")
    return results


# -------------------------------------------------------------------- main

def main():
    parser = argparse.ArgumentParser(description="Strata cpu vs PyTorch training throughput, fp32 and bf16, with MFU")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", default="small,gpt2_small,llama_small,smollm_135m,mixtral_small",
                        help="names of configs/bench/*.toml")
    parser.add_argument("--precisions", default="fp32,bf16", help="fp32, bf16 or both")
    parser.add_argument("--steps", type=int, default=0, help="steps per run (default: the config's train.steps)")
    parser.add_argument("--warmup", type=int, default=1, help="first steps of each run left out of its median")
    parser.add_argument("--strata", default=os.path.join(REPO, "build", "bin", "strata"))
    parser.add_argument("--strata-before", default=None,
                        help="another strata binary (e.g. a build of the commit before a change) run as one more "
                             "engine in every repeat, for same-run before/after figures")
    parser.add_argument("--gemm-peak", default=None, help="strata-gemm-peak (default: next to --strata)")
    parser.add_argument("--peak-seconds", type=float, default=1.5, help="strata-gemm-peak's time per shape and dtype")
    parser.add_argument("--torch-venv", default=DEFAULT_TORCH_VENV,
                        help="virtual environment with PyPI's torch (made there when missing)")
    parser.add_argument("--torch-warmup", type=int, default=2,
                        help="current PyTorch's first steps left out (torch.compile compiles in the first)")
    parser.add_argument("--no-debian-torch", action="store_true", help="skip Debian's PyTorch 1.13 column")
    parser.add_argument("--json", help="also write every raw figure to this file")
    args = parser.parse_args()
    args.strata = os.path.abspath(args.strata)
    args.strata_before = args.strata_before and os.path.abspath(args.strata_before)
    args.gemm_peak = os.path.abspath(args.gemm_peak or os.path.join(os.path.dirname(args.strata), "strata-gemm-peak"))
    args.precisions = args.precisions.split(",")
    if not set(args.precisions) <= {"fp32", "bf16"} or not args.precisions:
        sys.exit(f"--precisions: expected fp32, bf16 or fp32,bf16, got '{','.join(args.precisions)}'")
    for tool in (args.strata, args.gemm_peak) + ((args.strata_before,) if args.strata_before else ()):
        if not os.access(tool, os.X_OK):
            sys.exit(f"no executable at {tool} (build targets strata and strata_gemm_peak, or pass --strata/--gemm-peak)")
    if not os.path.isdir(OPENMP_OPENBLAS):
        sys.exit(f"{OPENMP_OPENBLAS} is missing: apt-get install libopenblas0-openmp")

    args.torch_python = ensure_torch_venv(args)
    models = {name: load_model(name) for name in args.models.split(",")}
    for model in models.values():
        ensure_corpus(args, model["data_dir"])
        model["flops"] = model_flops_per_token(model)

    print(f"threads {args.threads}, repeats {args.repeats}, warm-up steps {args.warmup}; "
          f"machine OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}", flush=True)
    shapes = peak_shapes(models)
    gemm = {"start": measure_gemm_peak(args, shapes)}
    print("GEMM peak at the start: " + ", ".join(
        f"{s['m']}x{s['n']}x{s['k']} fp32 {s['fp32_gflops']:.0f} / bf16 "
        f"{'none' if s['bf16_gflops'] is None else format(s['bf16_gflops'], '.0f')} GFLOP/s"
        for s in gemm["start"]["shapes"]), flush=True)
    for model in models.values():
        model["runs"] = {engine: [] for engine, _ in engines_for(args, model)}
    with tempfile.TemporaryDirectory(prefix="strata-bench-") as work_dir:
        for repeat in range(args.repeats):
            for name, model in models.items():
                steps = args.steps or model["steps"]
                for engine, run in engines_for(args, model):
                    load = load_average()
                    result = run(steps, work_dir)
                    result["load"] = [load, load_average()]
                    model["runs"][engine].append(result)
                    print(f"[{repeat + 1}/{args.repeats}] {name:<12} {engine:<15} {result['tokens_per_s']:9.1f} tokens/s"
                          f"  (load {load} -> {result['load'][1]}; steps: {', '.join(f'{r:.0f}' for r in result['steps'])}; "
                          f"{result['note']})", flush=True)
    gemm["end"] = measure_gemm_peak(args, shapes)
    peaks = {dtype: best_peak(gemm, dtype) for dtype in ("fp32", "bf16")}

    summaries = {name: summarise(model, model["runs"], peaks) for name, model in models.items()}
    print_summary(args, models, summaries, peaks, gemm)
    targets = check_targets(models, summaries)

    if args.json:
        write_json_atomic(args.json, {
            "command": sys.argv, "threads": args.threads, "repeats": args.repeats, "warmup": args.warmup,
            "machine_openblas_coretype": os.environ.get("OPENBLAS_CORETYPE"),
            "tuned_env": {k: tuned_env(args.threads)[k] for k in
                          ("LD_LIBRARY_PATH", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GLIBC_TUNABLES")},
            "flops_formula": FLOPS_FORMULA, "gemm_peak_runs": gemm, "gemm_peak": peaks,
            "models": {name: {"config": {k: v for k, v in model.items() if k not in ("runs", "flops")},
                              "steps": args.steps or model["steps"], "flops": model["flops"],
                              "runs": model["runs"], **summaries[name]}
                       for name, model in models.items()},
            "targets": targets})
        print(f"\nraw figures: {args.json}")


if __name__ == "__main__":
    main()
