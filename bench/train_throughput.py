#!/usr/bin/python3
"""Training throughput: Strata's `cpu` backend against PyTorch, fp32 and bf16,
on this machine, in one run, at one thread count, with model-FLOPs utilisation
(MFU) against the GEMM peak measured in the same run.

For each model in configs/bench/ (GPT-2 small at 1024 tokens, and a small
6-layer model at 256 tokens) and each repeat, it runs in turn:
  - Strata fp32: `strata train CONFIG` (tokens_per_s from its metrics.jsonl);
  - PyTorch tuned fp32: tests/golden/torch_gpt2.py with the OpenMP build of
    OpenBLAS, the machine's OpenBLAS core overrides removed, and glibc malloc
    kept from returning memory to the kernel (see ../shared/README.md);
  - Strata bf16: the same with `--set precision.compute=bf16`;
  - PyTorch tuned bf16: torch.autocast("cpu", dtype=torch.bfloat16) around
    forward and loss, fp32 master weights, same environment;
  - PyTorch fp32 with the machine's defaults (same thread count).
Strata runs under the tuned environment (same allocator and thread variables).
Each run reports the median tokens/s over its steps after the first `--warmup`;
the summary gives the median over repeats.

strata-gemm-peak runs before the first and after the last training run; the
best fp32 and bf16 GFLOP/s over both runs and all its shapes are the peaks.
Model FLOPs per token (PaLM / Megatron convention, causal mask not discounted):
    6 * N + 12 * L * T * C,  N = 12 * L * C^2 + V * C
(N: the weight matrices; the LM head tied to the token embedding counted once;
biases, LayerNorm and position embeddings left out).
MFU = tokens/s * FLOPs per token / peak FLOP/s.

Usage: /usr/bin/python3 bench/train_throughput.py [--threads N] [--repeats R]
       [--models small,gpt2_small] [--precisions fp32,bf16] [--strata build/bin/strata]
       [--gemm-peak build/bin/strata-gemm-peak] [--no-default-torch] [--json PATH]
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
PYTHON = "/usr/bin/python3"  # Debian's python3-torch is importable only from this interpreter
OPENMP_OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-openmp"
MALLOC_KEEP_MEMORY = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736"
FLOPS_FORMULA = "6*N + 12*L*T*C per token, N = 12*L*C^2 + V*C (weight matrices, tied LM head once)"

# The targets: (label, the model summary's figure or None when not measured, required minimum).
TARGETS = [
    ("Strata fp32 >= 1.3x tuned PyTorch fp32", lambda m: m["ratio"].get("fp32"), 1.3),
    ("Strata fp32 MFU >= 65% of measured sgemm peak", lambda m: m["mfu_fp32_peak"].get("strata fp32"), 0.65),
    ("Strata bf16 >= 1.3x tuned PyTorch bf16", lambda m: m["ratio"].get("bf16"), 1.3),
    ("Strata bf16 >= 1.6x Strata fp32", lambda m: m["strata_bf16_over_fp32"], 1.6),
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

def run_strata(args, name, model, precision, steps, work_dir):
    run_dir = os.path.join(work_dir, f"strata-{name}-{precision}")
    shutil.rmtree(run_dir, ignore_errors=True)
    command = [args.strata, "train", model["path"], "--set", f"train.steps={steps}",
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


def run_torch(args, model, precision, steps, env):
    command = [PYTHON, TORCH_GPT2, "--n-layer", str(model["n_layer"]), "--n-head", str(model["n_head"]),
               "--n-embd", str(model["n_embd"]), "--vocab-size", str(model["vocab_size"]),
               "--seq", str(model["block_size"]), "--batch", str(model["batch_size"]), "--steps", str(steps),
               "--warmup", str(args.warmup), "--data", model["data_dir"], "--threads", str(args.threads),
               "--precision", precision]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"torch failed ({' '.join(command)}):\n{done.stdout}{done.stderr}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["note"] = result["blas"]
    if precision == "bf16":
        result["note"] += f"; bf16 matmuls through oneDNN (mkldnn available: {result['mkldnn']})"
    result["command"] = command
    return result


def engines_for(args):
    """(label, kind, precision, environment or None for Strata's own), in the order each repeat runs them."""
    engines = []
    for precision in args.precisions:
        engines.append((f"strata {precision}", "strata", precision, None))
        engines.append((f"torch tuned {precision}", "torch", precision, tuned_env(args.threads)))
    if "fp32" in args.precisions and not args.no_default_torch:
        engines.append(("torch default fp32", "torch", "fp32", dict(os.environ)))
    return engines


# --------------------------------------------------------------- GEMM peak

def peak_shapes(models):
    """Besides strata-gemm-peak's square sizes: each model's largest GEMM (the
    MLP's first projection, rows B*T, columns 4C, depth C)."""
    shapes = {(m["batch_size"] * m["block_size"], 4 * m["n_embd"], m["n_embd"]) for m in models.values()}
    return ";".join(f"{m},{n},{k}" for m, n, k in sorted(shapes))


def measure_gemm_peak(args, shapes):
    command = [args.gemm_peak, "--threads", str(args.threads), "--seconds", str(args.peak_seconds),
               "--shapes", shapes, "--json"]
    done = subprocess.run(command, cwd=REPO, env=tuned_env(args.threads), capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"strata-gemm-peak failed ({' '.join(command)}):\n{done.stdout}{done.stderr}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["kernels"] = done.stderr.strip().splitlines()  # which oneDNN implementation ran the bf16 shapes
    result["load"] = load_average()
    return result


def best_peak(measurements, dtype):
    """The highest GFLOP/s of `dtype` over every run and shape, with where it came from."""
    key = f"{dtype}_gflops"
    best = max(((shape[key], run, shape) for run, m in measurements.items() for shape in m["shapes"]),
               key=lambda entry: entry[0])
    gflops, run, shape = best
    return {"gflops": gflops, "run": run, "m": shape["m"], "n": shape["n"], "k": shape["k"]}


# ------------------------------------------------------------------ models

def model_flops_per_token(model):
    layers, width, vocab, seq = model["n_layer"], model["n_embd"], model["vocab_size"], model["block_size"]
    matrix_params = 12 * layers * width * width + vocab * width
    attention = 12 * layers * seq * width
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
    model.update(path=path, data_dir=config["data"]["dir"], batch_size=config["train"]["batch_size"],
                 steps=config["train"]["steps"])
    if config["train"]["global_batch"] != model["batch_size"]:
        sys.exit(f"{path}: the benchmark expects global_batch == batch_size (no accumulation)")
    return model


# ----------------------------------------------------------------- summary

def summarise(model, runs, peaks):
    """Medians over repeats, ratios and MFU for one model."""
    median = {engine: statistics.median(r["tokens_per_s"] for r in results) for engine, results in runs.items()}
    flops = model["flops"]["flops_per_token"]
    summary = {"median_tokens_per_s": median, "ratio": {}, "ratio_vs_default": None,
               "mfu_fp32_peak": {engine: rate * flops / (peaks["fp32"]["gflops"] * 1e9) for engine, rate in median.items()},
               "mfu_bf16_peak": {engine: rate * flops / (peaks["bf16"]["gflops"] * 1e9)
                                 for engine, rate in median.items() if engine.endswith("bf16")},
               "strata_bf16_over_fp32": None}
    for precision in ("fp32", "bf16"):
        strata, torch = median.get(f"strata {precision}"), median.get(f"torch tuned {precision}")
        if strata and torch:
            summary["ratio"][precision] = strata / torch
    if "strata fp32" in median and "torch default fp32" in median:
        summary["ratio_vs_default"] = median["strata fp32"] / median["torch default fp32"]
    if "strata fp32" in median and "strata bf16" in median:
        summary["strata_bf16_over_fp32"] = median["strata bf16"] / median["strata fp32"]
    return summary


def percent(value):
    return f"{100 * value:5.1f}%" if value is not None else "     -"


def rate(value):
    return f"{value:9.1f}" if value is not None else "        -"


def times(value):
    return f"{value:5.2f}x" if value is not None else "     -"


def print_summary(args, models, summaries, peaks):
    print(f"\nGEMM peak ({args.threads} threads, best of the runs before and after training, oneDNN):")
    for dtype in ("fp32", "bf16"):
        p = peaks[dtype]
        print(f"  {dtype}: {p['gflops']:.1f} GFLOP/s (M,N,K = {p['m']},{p['n']},{p['k']}; run at the {p['run']})")
    print(f"model FLOPs: {FLOPS_FORMULA}")
    print("\nmedian tokens/s over repeats (each run: median over its steps after warm-up); "
          "ratio = Strata / tuned PyTorch; MFU against the fp32 peak, and for bf16 also against the bf16 peak")
    print(f"{'model':<11} {'prec':<4} {'strata':>9} {'torch':>9} {'ratio':>6} {'MFU strata':>10} {'MFU torch':>10}"
          f" {'bf16-pk S':>10} {'bf16-pk T':>10} {'arena MiB':>10}")
    for name, model in models.items():
        s = summaries[name]
        median = s["median_tokens_per_s"]
        for precision in args.precisions:
            strata, torch = f"strata {precision}", f"torch tuned {precision}"
            arena = statistics.median(r["arena_mib"] for r in model["runs"][strata]) \
                if all(r["arena_mib"] is not None for r in model["runs"][strata]) else None
            print(f"{name:<11} {precision:<4} {rate(median[strata])} {rate(median[torch])} "
                  f"{times(s['ratio'].get(precision))} {percent(s['mfu_fp32_peak'][strata]):>10} "
                  f"{percent(s['mfu_fp32_peak'][torch]):>10} {percent(s['mfu_bf16_peak'].get(strata)):>10} "
                  f"{percent(s['mfu_bf16_peak'].get(torch)):>10} {f'{arena:.1f}' if arena is not None else '-':>10}")
        print(f"{'':<11} seq {model['block_size']}, batch {model['batch_size']}, "
              f"{model['flops']['flops_per_token'] / 1e6:.1f} MFLOP/token "
              f"(N = {model['flops']['matrix_params'] / 1e6:.2f}M); Strata bf16/fp32 {times(s['strata_bf16_over_fp32'])}")
        if "torch default fp32" in median:
            print(f"{'':<11} PyTorch with the machine's defaults, fp32: {median['torch default fp32']:.1f} tokens/s "
                  f"(Strata fp32 / it: {times(s['ratio_vs_default'])}; "
                  f"BLAS: {model['runs']['torch default fp32'][0]['blas']})")
        for precision in args.precisions:
            print(f"{'':<11} tuned PyTorch {precision} ran: {model['runs'][f'torch tuned {precision}'][0]['note']}")


def check_targets(models, summaries):
    results = []
    for name in models:
        for label, figure, required in TARGETS:
            measured = figure(summaries[name])
            if measured is None:
                continue
            results.append({"model": name, "target": label, "measured": measured, "required": required,
                            "met": measured >= required})
    print("\ntargets (issue 5):")
    for t in results:
        shown = f"{100 * t['measured']:.1f}%" if "MFU" in t["target"] else f"{t['measured']:.2f}x"
        print(f"  {t['model']:<11} {t['target']:<46} {shown:>8}  {'met' if t['met'] else 'NOT met'}")
    return results


# -------------------------------------------------------------------- main

def main():
    parser = argparse.ArgumentParser(description="Strata cpu vs PyTorch training throughput, fp32 and bf16, with MFU")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", default="small,gpt2_small", help="names of configs/bench/*.toml")
    parser.add_argument("--precisions", default="fp32,bf16", help="fp32, bf16 or both")
    parser.add_argument("--steps", type=int, default=0, help="steps per run (default: the config's train.steps)")
    parser.add_argument("--warmup", type=int, default=1, help="first steps of each run left out of its median")
    parser.add_argument("--strata", default=os.path.join(REPO, "build", "bin", "strata"))
    parser.add_argument("--gemm-peak", default=None, help="strata-gemm-peak (default: next to --strata)")
    parser.add_argument("--peak-seconds", type=float, default=1.5, help="strata-gemm-peak's time per shape and dtype")
    parser.add_argument("--no-default-torch", action="store_true", help="skip PyTorch fp32 with the machine's defaults")
    parser.add_argument("--json", help="also write every raw figure to this file")
    args = parser.parse_args()
    args.strata = os.path.abspath(args.strata)
    args.gemm_peak = os.path.abspath(args.gemm_peak or os.path.join(os.path.dirname(args.strata), "strata-gemm-peak"))
    args.precisions = args.precisions.split(",")
    if not set(args.precisions) <= {"fp32", "bf16"} or not args.precisions:
        sys.exit(f"--precisions: expected fp32, bf16 or fp32,bf16, got '{','.join(args.precisions)}'")
    for tool in (args.strata, args.gemm_peak):
        if not os.access(tool, os.X_OK):
            sys.exit(f"no executable at {tool} (build targets strata and strata_gemm_peak, or pass --strata/--gemm-peak)")
    if not os.path.isdir(OPENMP_OPENBLAS):
        sys.exit(f"{OPENMP_OPENBLAS} is missing: apt-get install libopenblas0-openmp")

    models = {name: load_model(name) for name in args.models.split(",")}
    for model in models.values():
        ensure_corpus(args, model["data_dir"])
        model["flops"] = model_flops_per_token(model)
    engines = engines_for(args)

    print(f"threads {args.threads}, repeats {args.repeats}, warm-up steps {args.warmup}; "
          f"machine OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}", flush=True)
    shapes = peak_shapes(models)
    gemm = {"start": measure_gemm_peak(args, shapes)}
    print("GEMM peak at the start: " + ", ".join(
        f"{s['m']}x{s['n']}x{s['k']} fp32 {s['fp32_gflops']:.0f} / bf16 {s['bf16_gflops']:.0f} GFLOP/s"
        for s in gemm["start"]["shapes"]), flush=True)
    for model in models.values():
        model["runs"] = {engine: [] for engine, _, _, _ in engines}
    with tempfile.TemporaryDirectory(prefix="strata-bench-") as work_dir:
        for repeat in range(args.repeats):
            for name, model in models.items():
                steps = args.steps or model["steps"]
                for engine, kind, precision, env in engines:
                    load = load_average()
                    if kind == "strata":
                        result = run_strata(args, name, model, precision, steps, work_dir)
                    else:
                        result = run_torch(args, model, precision, steps, env)
                    result["load"] = [load, load_average()]
                    model["runs"][engine].append(result)
                    print(f"[{repeat + 1}/{args.repeats}] {name:<11} {engine:<18} {result['tokens_per_s']:9.1f} tokens/s"
                          f"  (load {load} -> {result['load'][1]}; steps: {', '.join(f'{r:.0f}' for r in result['steps'])}; "
                          f"{result['note']})", flush=True)
    gemm["end"] = measure_gemm_peak(args, shapes)
    peaks = {dtype: best_peak(gemm, dtype) for dtype in ("fp32", "bf16")}

    summaries = {name: summarise(model, model["runs"], peaks) for name, model in models.items()}
    print_summary(args, models, summaries, peaks)
    targets = check_targets(models, summaries)

    if args.json:
        write_json_atomic(args.json, {
            "command": sys.argv, "threads": args.threads, "repeats": args.repeats, "warmup": args.warmup,
            "machine_openblas_coretype": os.environ.get("OPENBLAS_CORETYPE"),
            "tuned_env": {k: tuned_env(args.threads)[k] for k in
                          ("LD_LIBRARY_PATH", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GLIBC_TUNABLES")},
            "flops_formula": FLOPS_FORMULA, "gemm_peak_runs": gemm, "gemm_peak": peaks,
            "models": {name: {"config": {k: model[k] for k in ("n_layer", "n_head", "n_embd", "vocab_size",
                                                                "block_size", "batch_size", "path")},
                              "steps": args.steps or model["steps"], "flops": model["flops"],
                              "runs": model["runs"], **summaries[name]}
                       for name, model in models.items()},
            "targets": targets})
        print(f"\nraw figures: {args.json}")


if __name__ == "__main__":
    main()
