#!/usr/bin/python3
"""The planner's signed error on the published runs, broken down along every axis the CSVs and the plans give.

Reads the figures `validate.py --json OUT` wrote and the published CSVs, and prints Markdown tables: the mean
signed error (predicted/measured - 1) of the evaluated rows grouped by device preset, GPU count, model size,
framework, tokens per GPU per step, data-parallel degree, dtype and the predicted step's share in collectives and
in kernels; then, for each run measured at several GPU counts with the same layout per GPU, the error at the
smallest and the largest count. With --kernel-classes it also runs each row's `strata plan` command again with
--explain (the model files must still exist: `validate.sh --keep DIR --json FIGURES.json`), splits the predicted
kernels into GEMMs, attention and memory-bound ops, groups the rows by each class's share of the step, and solves
for the signed error each class would carry if the whole bias sat in one factor per class (least squares over the
rows, then again with each source left out, to show which of those factors hold). Which axis the bias follows is
the question it answers (bench/planner/README.md, "Where the missing time is"). Python 3 standard library only.

Usage: bias_axes.py FIGURES.json [--csv FILE...] [--kernel-classes]
"""
import argparse
import csv
import glob
import json
import os
import re
import statistics
import subprocess
import sys

PUBLISHED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "published")
COLLECTIVES = ("tp_comm", "pp_comm", "dp_comm", "zero_comm", "param_gather")  # plans[0].time_s keys

# (axis, the row's value, bins as (low, high, label) with low <= value < high; None: group by the value itself)
AXES = [
    ("device preset", lambda f: f["preset"], None),
    ("GPUs", lambda f: f["gpus"], [(0, 9, "8"), (9, 65, "16-64"), (65, 257, "128-256"), (257, 1025, "512-1024"),
                                    (1025, float("inf"), "2048+")]),
    ("parameters", lambda f: f["params"] / 1e9, [(0, 1, "< 1B"), (1, 3, "1-3B"), (3, 10, "3-10B"),
                                                 (10, 40, "10-40B"), (40, 100, "40-100B"),
                                                 (100, float("inf"), "100B+")]),
    ("framework", lambda f: f["framework"], None),
    ("tokens per GPU per step", lambda f: f["tokens_per_gpu"],
     [(0, 4097, "<= 4K"), (4097, 16385, "4K-16K"), (16385, 65537, "16K-64K"), (65537, 262145, "64K-256K"),
      (262145, float("inf"), "> 256K")]),
    ("data-parallel degree", lambda f: f["dp"], [(1, 2, "1"), (2, 9, "2-8"), (9, 65, "9-64"), (65, 257, "65-256"),
                                                 (257, float("inf"), "257+")]),
    ("dtype", lambda f: f["dtype"], None),
    ("collectives' share of the predicted step", lambda f: f["collective_share"],
     [(0, 0.02, "< 2%"), (0.02, 0.05, "2-5%"), (0.05, 0.10, "5-10%"), (0.10, 0.20, "10-20%"), (0.20, 1.01, "> 20%")]),
    ("kernels' share of the predicted step", lambda f: f["kernel_share"],
     [(0, 0.80, "< 80%"), (0.80, 0.90, "80-90%"), (0.90, 0.95, "90-95%"), (0.95, 1.01, ">= 95%")]),
]


# `strata plan --explain` term -> kernel class (src/planner/explain.cpp's names)
KERNEL_CLASSES = {"compute: GEMMs": "GEMMs", "compute: float8 GEMMs": "GEMMs",
                  "compute: experts' grouped GEMMs": "GEMMs", "compute: attention": "attention",
                  "compute: memory-bound and element-wise ops": "memory-bound"}
CLASS_NAMES = ("GEMMs", "attention", "memory-bound")
EXPLAIN_TERM = re.compile(r"^\s+(compute: .+?)\s{2,}([0-9.]+) (s|ms|us)\b")
UNIT_S = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
SHARE_BINS = [(0, 0.05, "< 5%"), (0.05, 0.10, "5-10%"), (0.10, 0.20, "10-20%"), (0.20, 0.40, "20-40%"),
              (0.40, 0.70, "40-70%"), (0.70, 0.85, "70-85%"), (0.85, 1.01, ">= 85%")]


def parameters(row):
    """Weights of the row's model (embedding and every layer's matrices; norms and biases left out)."""
    layers, hidden, ffn, vocab = (int(row[k]) for k in ("n_layer", "hidden", "ffn_hidden", "vocab"))
    heads = int(row["n_head"])
    kv_width = int(row["n_kv_head"] or heads) * (hidden // heads)
    if row["family"] == "gpt":
        per_layer = 4 * hidden * hidden + 2 * hidden * ffn
    else:  # q and o full width, k and v at the key/value heads' width, SwiGLU's three matrices
        per_layer = 2 * hidden * hidden + 2 * hidden * kv_width + 3 * hidden * ffn
    return layers * per_layer + vocab * hidden


def row_features(record, row):
    """The axes' values for one evaluated row."""
    times, step = record["time_s"], record["predicted_s"]
    gpus = int(row["gpus"])
    preset = record["command"].split()[3]  # `strata plan MODEL PRESET ...`
    return {"source": row["source"], "preset": os.path.basename(preset), "framework": row["framework"],
            "dtype": row["dtype"], "gpus": gpus, "dp": int(row["dp"]), "params": parameters(row),
            "tokens_per_gpu": int(row["global_batch"]) * int(row["seq"]) / gpus,
            "collective_share": sum(times.get(k, 0.0) for k in COLLECTIVES) / step,
            "kernel_share": (times.get("compute", 0.0) + times.get("recompute", 0.0)) / step,
            "error": record["error"], "model": row["model"], "layout": layout_per_gpu(row)}


def layout_per_gpu(row):
    """What stays the same when a run is repeated at more GPUs by data parallelism alone."""
    keys = ("model", "dtype", "seq", "micro_batch", "tp", "pp", "cp", "virtual_stages", "zero", "recompute",
            "framework", "compile", "attention", "device")
    return tuple(row[k] for k in keys) + (int(row["global_batch"]) // int(row["dp"]),)


def kernel_classes(record):
    """Each kernel class's share of the predicted step, from the row's command run again with --explain."""
    command = [arg for arg in record["command"].split() if arg != "--json"] + ["--explain"]
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{record['id']}: `{' '.join(command)}` failed: {proc.stderr.strip()[-300:]}")
    seconds = dict.fromkeys(CLASS_NAMES, 0.0)
    for line in proc.stdout.splitlines():
        match = EXPLAIN_TERM.match(line)
        if match and match.group(1).strip() in KERNEL_CLASSES:
            seconds[KERNEL_CLASSES[match.group(1).strip()]] += float(match.group(2)) * UNIT_S[match.group(3)]
    total = sum(seconds.values())
    if total <= 0:
        raise RuntimeError(f"{record['id']}: --explain printed no compute terms")
    kernels = record["time_s"].get("compute", 0.0) + record["time_s"].get("recompute", 0.0)
    # --explain reports one pipeline stage; its split of the kernels is applied to the whole step's kernel time
    return {name: value / total * kernels / record["predicted_s"] for name, value in seconds.items()}


def least_squares(xs, ys):
    """Coefficients c minimising sum (y - c.x)^2, by the normal equations and Gaussian elimination."""
    n = len(xs[0])
    m = [[sum(x[p] * x[q] for x in xs) for q in range(n)] + [sum(x[p] * y for x, y in zip(xs, ys))]
         for p in range(n)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col:
                factor = m[r][col] / m[col][col]
                m[r] = [a - factor * b for a, b in zip(m[r], m[col])]
    return [m[i][n] / m[i][i] for i in range(n)]


def class_factors(features):
    """Signed error per kernel class (and the non-kernel rest), over all rows and with each source left out."""
    def solve(subset):
        xs = [[f[name] for name in CLASS_NAMES] + [1 - f["kernel_share"]] for f in subset]
        return least_squares(xs, [f["error"] for f in subset])
    lines = ["| rows | " + " | ".join(CLASS_NAMES) + " | non-kernel terms |", "|---" * 5 + "|"]
    subsets = [("all", features)] + [(f"without {source}", [f for f in features if f["source"] != source])
                                     for source in sorted({f["source"] for f in features})]
    for label, subset in subsets:
        lines.append(f"| {label} ({len(subset)}) | " + " | ".join(pct(c) for c in solve(subset)) + " |")
    return lines


def label_of(value, bins):
    if bins is None:
        return str(value)
    return next(label for low, high, label in bins if low <= value < high)


def pct(value):
    return f"{100 * value:+.1f}%"


def axis_table(features, axis, value, bins):
    """Markdown rows of one axis: its groups in order, each with count, mean and median signed error, sources."""
    groups = {}
    for f in features:
        groups.setdefault(label_of(value(f), bins), []).append(f)
    order = [label for _, _, label in bins] if bins else sorted(groups)
    lines = []
    for label in (l for l in order if l in groups):
        errors = [f["error"] for f in groups[label]]
        sources = ", ".join(sorted({f["source"] for f in groups[label]}))
        lines.append(f"| {axis} | {label} | {len(errors)} | {pct(statistics.mean(errors))} | "
                     f"{pct(statistics.median(errors))} | {pct(min(errors))}..{pct(max(errors))} | {sources} |")
    return lines


def sweep_table(features):
    """Runs measured at two or more GPU counts with the same work per GPU: error at the fewest and most GPUs."""
    sweeps = {}
    for f in features:
        sweeps.setdefault((f["source"], f["layout"]), []).append(f)
    lines = ["| source | model, dtype | GPUs | error at the fewest | at the most | change |",
             "|---|---|---|---|---|---|"]
    for (source, _), runs in sorted(sweeps.items(), key=lambda item: item[0][0]):
        if len({f["gpus"] for f in runs}) < 2:
            continue
        runs.sort(key=lambda f: f["gpus"])
        first, last = runs[0], runs[-1]
        lines.append(f"| {source} | {first['model']}, {first['dtype']} | {first['gpus']}-{last['gpus']} | "
                     f"{pct(first['error'])} | {pct(last['error'])} | "
                     f"{100 * (last['error'] - first['error']):+.1f} points |")
    return lines


def read_rows(paths):
    rows = {}
    for path in paths:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                rows[row["id"]] = row
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("figures", help="the file validate.py --json wrote")
    ap.add_argument("--csv", nargs="+", metavar="FILE", help="published CSVs (default: published/*.csv)")
    ap.add_argument("--kernel-classes", action="store_true",
                    help="also split the kernels by class (runs each row's command again with --explain)")
    args = ap.parse_args()
    try:
        with open(args.figures) as f:
            records = [r for r in json.load(f)["rows"] if r.get("status") == "ok"]
        rows = read_rows(args.csv or sorted(glob.glob(os.path.join(PUBLISHED, "*.csv"))))
    except (OSError, ValueError, KeyError) as e:
        print(f"bias_axes.py: cannot read the figures or the CSVs: {e}", file=sys.stderr)
        return 2
    missing = [r["id"] for r in records if r["id"] not in rows]
    if missing:
        print(f"bias_axes.py: rows in {args.figures} not in the CSVs: {', '.join(missing)}", file=sys.stderr)
        return 2
    features = [row_features(r, rows[r["id"]]) for r in records]
    axes = list(AXES)
    if args.kernel_classes:
        try:
            for feature, record in zip(features, records):
                feature.update(kernel_classes(record))
        except (OSError, RuntimeError) as e:
            print(f"bias_axes.py: {e}", file=sys.stderr)
            return 2
        axes += [(f"share of the predicted step in {name}", lambda f, n=name: f[n], SHARE_BINS) for name in CLASS_NAMES]
    print(f"{len(features)} evaluated rows; error = predicted/measured - 1\n")
    print("| axis | group | rows | mean signed | median | range | sources |\n|---|---|---|---|---|---|---|")
    for axis, value, bins in axes:
        print("\n".join(axis_table(features, axis, value, bins)))
    print()
    print("\n".join(sweep_table(features)))
    if args.kernel_classes:
        print("\nsigned error of each class if the bias sat in one factor per class (least squares):\n")
        print("\n".join(class_factors(features)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
