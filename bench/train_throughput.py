#!/usr/bin/python3
"""Training throughput: Strata's `cpu` backend against PyTorch, fp32, on this
machine, in one run, at one thread count.

For each model in configs/bench/ (GPT-2 small at 1024 tokens, and a small
6-layer model at 256 tokens) and each repeat, it runs in turn:
  - Strata: `strata train CONFIG` (tokens_per_s from the run's metrics.jsonl);
  - PyTorch tuned: tests/golden/torch_gpt2.py with the OpenMP build of
    OpenBLAS, the machine's OpenBLAS core overrides removed, and glibc malloc
    kept from returning memory to the kernel (see ../shared/README.md);
  - PyTorch with the machine's defaults (same thread count).
Strata runs under the tuned run's environment (same allocator setting and
thread variables). Each run reports the median tokens/s over its steps after
the first `--warmup`; the summary gives the median over repeats, the ratio
Strata / PyTorch and Strata's peak arena memory.

Usage: /usr/bin/python3 bench/train_throughput.py [--threads N] [--repeats R]
       [--models small,gpt2_small] [--strata build/bin/strata] [--no-default-torch]
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


def run_strata(args, name, config_path, steps, work_dir):
    run_dir = os.path.join(work_dir, f"strata-{name}")
    shutil.rmtree(run_dir, ignore_errors=True)
    command = [args.strata, "train", config_path, "--set", f"train.steps={steps}",
               "--set", f"ops.threads={args.threads}", "--set", f"checkpoint.dir={run_dir}"]
    done = subprocess.run(command, cwd=REPO, env=tuned_env(args.threads), capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"strata failed ({' '.join(command)}):\n{done.stdout}{done.stderr}")
    arena = re.search(r"arena ([0-9.]+) MiB", done.stdout)
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        rates = [json.loads(line)["tokens_per_s"] for line in f if line.strip()]
    shutil.rmtree(run_dir, ignore_errors=True)  # the final checkpoint is not needed
    # After the steps Strata prints either that every op ran natively or its fallback summary.
    tail = done.stdout.rstrip().splitlines()
    last_step = max((i for i, line in enumerate(tail) if line.startswith("step ")), default=-1)
    summary = " | ".join(line.strip() for line in tail[last_step + 1:])
    return {"tokens_per_s": median_after_warmup(rates, args.warmup), "steps": rates,
            "arena_mib": float(arena.group(1)) if arena else None, "note": summary}


def run_torch(args, model, steps, env):
    command = [PYTHON, TORCH_GPT2, "--n-layer", str(model["n_layer"]), "--n-head", str(model["n_head"]),
               "--n-embd", str(model["n_embd"]), "--vocab-size", str(model["vocab_size"]),
               "--seq", str(model["block_size"]), "--batch", str(model["batch_size"]), "--steps", str(steps),
               "--warmup", str(args.warmup), "--data", model["data_dir"], "--threads", str(args.threads)]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"torch failed ({' '.join(command)}):\n{done.stdout}{done.stderr}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["note"] = result["blas"]
    return result


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


def main():
    parser = argparse.ArgumentParser(description="Strata cpu vs PyTorch training throughput")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", default="small,gpt2_small", help="names of configs/bench/*.toml")
    parser.add_argument("--steps", type=int, default=0, help="steps per run (default: the config's train.steps)")
    parser.add_argument("--warmup", type=int, default=1, help="first steps of each run left out of its median")
    parser.add_argument("--strata", default=os.path.join(REPO, "build", "bin", "strata"))
    parser.add_argument("--no-default-torch", action="store_true", help="skip PyTorch with the machine's defaults")
    args = parser.parse_args()
    args.strata = os.path.abspath(args.strata)
    if not os.access(args.strata, os.X_OK):
        sys.exit(f"no strata executable at {args.strata} (build it, or pass --strata)")
    if not os.path.isdir(OPENMP_OPENBLAS):
        sys.exit(f"{OPENMP_OPENBLAS} is missing: apt-get install libopenblas0-openmp")

    models = {name: load_model(name) for name in args.models.split(",")}
    for model in models.values():
        ensure_corpus(args, model["data_dir"])
    engines = {"strata": None, "torch tuned": tuned_env(args.threads)}
    if not args.no_default_torch:
        engines["torch default"] = dict(os.environ)

    print(f"threads {args.threads}, repeats {args.repeats}, warm-up steps {args.warmup}; "
          f"machine OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}", flush=True)
    results = {(name, engine): [] for name in models for engine in engines}
    with tempfile.TemporaryDirectory(prefix="strata-bench-") as work_dir:
        for repeat in range(args.repeats):
            for name, model in models.items():
                steps = args.steps or model["steps"]
                for engine, env in engines.items():
                    load = load_average()
                    if engine == "strata":
                        result = run_strata(args, name, model["path"], steps, work_dir)
                    else:
                        result = run_torch(args, model, steps, env)
                    results[(name, engine)].append(result)
                    print(f"[{repeat + 1}/{args.repeats}] {name:<11} {engine:<14} {result['tokens_per_s']:9.1f} tokens/s"
                          f"  (load {load} -> {load_average()}; steps: {', '.join(f'{r:.0f}' for r in result['steps'])}; "
                          f"{result['note']})", flush=True)

    print("\nmedian tokens/s over repeats (each run: median over its steps after warm-up)")
    header = f"{'model':<11} {'seq':>5} {'batch':>5} {'strata':>9} {'arena MiB':>10}"
    for engine in engines:
        if engine != "strata":
            header += f" {engine:>14} {'ratio':>6}"
    print(header)
    for name, model in models.items():
        strata = statistics.median(r["tokens_per_s"] for r in results[(name, "strata")])
        arena = results[(name, "strata")][0]["arena_mib"]
        line = f"{name:<11} {model['block_size']:>5} {model['batch_size']:>5} {strata:9.1f} {arena:10.1f}"
        for engine in engines:
            if engine != "strata":
                torch_rate = statistics.median(r["tokens_per_s"] for r in results[(name, engine)])
                line += f" {torch_rate:14.1f} {strata / torch_rate:6.2f}"
        print(line)
    print("ratio = Strata / PyTorch tokens/s (>= 1.0: Strata is at least as fast)")


if __name__ == "__main__":
    main()
