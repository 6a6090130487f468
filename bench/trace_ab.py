#!/usr/bin/env python3
"""Where two strata builds differ inside a training step, op class by op class.

Runs `strata train CONFIG --trace` with each of two binaries in turn, RUNS times
(before, after, before, after, ...), and sums each traced step's kernel time by
op class (GEMMs, attention, norms, ...; op names not in a class are listed on
their own). Prints per class the median over runs and the range, ms a step, for
each build, and the median of after/before.

The host here is shared and its speed moves by up to 2x within minutes, so a
class's time is also given as a share of the same run's GEMM time. That share
cancels a host that slows every kernel alike; it does not where the host slows
some kernels more than others (runs a minute apart here moved the GEMMs by
1.37x and the element-wise ops by 1.05x), so quote it beside the medians and
their ranges, not instead of them, and prefer more runs to either.

Usage:
  bench/trace_ab.py CONFIG --before OLD_STRATA [--after build/bin/strata]
      [--runs 3] [--steps 6] [--trace-steps 2:5] [--threads 2] [--set KEY=VALUE ...]
      [--ops NAME,...] [--json FILE]
e.g. bench/trace_ab.py configs/bench/small.toml --before /tmp/strata_old --set precision.compute=bf16
"""
import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Op classes as bench/README.md's gap analyses name them; a kernel op of the step in none of them is its own row.
CLASSES = {
    "GEMMs": ["matmul", "linear", "grouped_matmul", "grouped_matmul_weight_grad", "bmm"],
    "attention": ["attention", "attention_backward", "grouped_attention", "grouped_attention_backward",
                  "causal_softmax", "causal_softmax_backward"],
    "optimizer (AdamW)": ["adamw", "adamw_with_copy"],
    "exact norm": ["square_sum_exact"],
    "SwiGLU / GELU": ["swiglu", "swiglu_backward", "gelu", "gelu_backward"],
    "norms": ["layernorm", "layernorm_backward", "add_layernorm", "layernorm_backward_add", "rms_norm",
              "rms_norm_backward", "add_rms_norm", "rms_norm_backward_add"],
    "cross-entropy": ["cross_entropy", "cross_entropy_backward"],
    "casts": ["cast"],
    "rope": ["rope"],
    "other element-wise": ["add", "scale", "sum_to", "fused_elementwise1", "fused_elementwise2", "fused_elementwise3",
                           "fused_elementwise4"],
    "embedding": ["embedding", "embedding_backward"],
}
CLASS_OF = {op: name for name, ops in CLASSES.items() for op in ops}


def run_once(strata, args, trace_path, work_dir):
    # A fresh checkpoint directory each run: train refuses one that holds an earlier run's checkpoints.
    checkpoints = tempfile.mkdtemp(prefix="checkpoints-", dir=work_dir)
    command = [strata, "train", args.config, "--set", f"ops.threads={args.threads}",
               "--set", f"checkpoint.dir={checkpoints}", "--set", "checkpoint.every=0",
               "--set", f"train.steps={args.steps}", "--trace", trace_path, "--trace-steps", args.trace_steps]
    for setting in args.set:
        command += ["--set", setting]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    spans = [e for e in events if e.get("ph") == "X"]
    steps = sum(1 for e in spans if e["name"] == "step")
    if steps == 0:
        sys.exit(f"{trace_path}: no traced step (--trace-steps {args.trace_steps} within {args.steps} steps?)")
    # Kernels (category "kernel") and the step; the phases between (micro-batch, graph, optimizer, ...) contain them.
    per_op = collections.defaultdict(float)
    for e in spans:
        if e.get("cat") == "kernel" or e["name"] == "step":
            per_op[e["name"]] += e["dur"] / 1000.0 / steps  # ms a step
    return per_op


def summarise(per_op, extra_ops):
    """ms a step by row: each class (or unclassed op), the ops of --ops, and the step."""
    rows = collections.defaultdict(float)
    for op, ms in per_op.items():
        if op == "step":
            rows["the step"] += ms
        else:
            rows[CLASS_OF.get(op, op)] += ms
            if op in extra_ops:
                rows[op] += ms
    return rows


def row_order(table, extra_ops):
    """Classes by the before build's median time, largest first, each followed by its ops of --ops; the step last."""
    def before_median(row):
        return statistics.median(rows.get(row, 0.0) for rows in table["before"])
    present = {row for side in table.values() for rows in side for row in rows}
    classes = sorted((row for row in present if row not in extra_ops and row != "the step"), key=before_median,
                     reverse=True)
    order = []
    for name in classes:
        order.append(name)
        order += sorted((op for op in extra_ops if op in present and CLASS_OF.get(op, op) == name), key=before_median,
                        reverse=True)
    return order + ["the step"]


def median_range(values):
    return statistics.median(values), min(values), max(values)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config")
    parser.add_argument("--before", required=True, help="the strata binary to compare against")
    parser.add_argument("--after", default=os.path.join(REPO, "build", "bin", "strata"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--trace-steps", default="2:5", help="strata train --trace-steps (steps traced, A:B)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--set", action="append", default=[], help="a strata train --set KEY=VALUE for both builds")
    parser.add_argument("--ops", default="", help="comma list of ops also shown on their own, under their class")
    parser.add_argument("--json", help="write every run's per-op figures here")
    args = parser.parse_args()
    builds = {"before": os.path.abspath(args.before), "after": os.path.abspath(args.after)}
    for name, path in builds.items():
        if not os.access(path, os.X_OK):
            sys.exit(f"--{name}: no executable at {path}")
    extra_ops = {op for op in args.ops.split(",") if op}

    runs = {"before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="strata-trace-ab-") as work_dir:
        for run in range(args.runs):
            for name in ("before", "after"):
                trace = os.path.join(work_dir, f"{name}_{run}.json")
                runs[name].append(run_once(builds[name], args, trace, work_dir))
                print(f"run {run + 1}/{args.runs} {name}: step {runs[name][-1]['step']:.1f} ms", file=sys.stderr)

    table = {name: [summarise(per_op, extra_ops) for per_op in per_run] for name, per_run in runs.items()}
    names = row_order(table, extra_ops)
    print(f"\n{args.config} {' '.join(args.set)}, {args.threads} threads, {args.runs} runs of each build, "
          f"steps {args.trace_steps} traced; ms a step, median (range); share = of the same run's GEMM time")
    print("| op class | before | after | after/before | share before | share after | share after/before |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for row in names:
        cells = []
        shares = {}
        for name in ("before", "after"):
            values = [rows.get(row, 0.0) for rows in table[name]]
            cells.append("{:.1f} ({:.1f}-{:.1f})".format(*median_range(values)))
            shares[name] = [rows.get(row, 0.0) / rows["GEMMs"] for rows in table[name] if rows.get("GEMMs")]
        before = statistics.median(rows.get(row, 0.0) for rows in table["before"])
        after = statistics.median(rows.get(row, 0.0) for rows in table["after"])
        ratio = f"{after / before:.2f}" if before > 0 else "-"
        share = {name: statistics.median(values) if values else None for name, values in shares.items()}
        share_cells = [f"{100 * share[name]:.1f}%" if share[name] is not None else "-" for name in ("before", "after")]
        share_ratio = (f"{share['after'] / share['before']:.2f}"
                       if share["before"] and share["after"] is not None and row != "GEMMs" else "-")
        label = f"- {row}" if row in extra_ops and CLASS_OF.get(row, row) != row else row
        print(f"| {label} | {cells[0]} | {cells[1]} | {ratio} | {share_cells[0]} | {share_cells[1]} | {share_ratio} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": args.config, "settings": args.set, "threads": args.threads, "builds": builds,
                       "runs": {name: [dict(per_op) for per_op in per_run] for name, per_run in runs.items()}},
                      f, indent=1)


if __name__ == "__main__":
    main()
