#!/usr/bin/env python3
"""strata report end to end: two real runs (f32 profiled with a planner prediction, fp16 with its loss
scale) on a tiny corpus, their report rendered by headless Chromium; in the DOM Chromium built, each
plot's line of each run has exactly as many points as that run's metrics.jsonl has finite values of
the metric, and the config diff, planner and op sections show what the runs recorded."""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser

VERSES = ["In the beginning God created the heaven and the earth.",
          "And the earth was without form, and void.",
          "And God said, Let there be light: and there was light.",
          "And God saw the light, that it was good."]
MODEL = ["model.n_layer=2", "model.n_head=2", "model.n_embd=64", "model.block_size=32", "model.vocab_size=300"]
METRICS = ["loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "loss_scale", "mfu"]
REQUIRED_FIGURES = ["loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "loss_scale"]


class PlotLines(HTMLParser):
    """Each plot-<metric>-run<i> group's line: the vertices of the first path inside it; and the ids."""

    def __init__(self):
        super().__init__()
        self.lines, self.ids, self.text = {}, set(), []
        self._open_group = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "g" and attrs.get("id", "").startswith("plot-"):
            self._open_group = attrs["id"]
        elif tag == "path" and self._open_group is not None:
            commands = attrs["d"].split()
            self.lines[self._open_group] = sum(1 for c in commands if c in ("M", "L"))
            self._open_group = None

    def handle_data(self, data):
        self.text.append(data)


def run(command, **kwargs):
    print("+", " ".join(command), flush=True)
    return subprocess.run(command, check=True, timeout=240, **kwargs)


def train(strata, config, run_dir, data_dir, overrides, extra=()):
    sets = [f"--set={item}" for item in MODEL + [f"data.dir={data_dir}", f"checkpoint.dir={run_dir}",
                                                 "checkpoint.resume=false"] + overrides]
    run([strata, "train", config, *sets, *extra], stdout=subprocess.DEVNULL)


def finite_counts(run_dir):
    counts = {metric: 0 for metric in METRICS}
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            for metric in METRICS:
                value = record.get(metric)
                if isinstance(value, (int, float)) and math.isfinite(value):
                    counts[metric] += 1
    return counts


def chromium(args, work):
    binary = shutil.which("chromium")
    if binary is None:
        sys.exit("chromium is not installed (scripts/setup.sh installs Debian's chromium)")
    return [binary, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={work}/chromium-profile",
            *args]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--strata", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    work = os.path.abspath(args.work_dir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    with open(os.path.join(work, "corpus.txt"), "w", encoding="utf-8") as text:
        for i in range(400):
            text.write(f"{VERSES[i % 4]} {i}\n")
    data = os.path.join(work, "data")
    run([args.strata, "data", "prepare", os.path.join(work, "corpus.txt"), "--out", data, "--vocab-size", "300"],
        stdout=subprocess.DEVNULL)
    runs = [os.path.join(work, "f32"), os.path.join(work, "f16")]
    train(args.strata, args.config, runs[0], data,
          ["train.batch_size=4", "train.global_batch=8", "train.steps=8", "train.val_every=3",
           "train.val_batches=2", "parallel.cluster=this-machine"], extra=["--profile"])
    train(args.strata, args.config, runs[1], data,
          ["train.batch_size=4", "train.global_batch=4", "train.steps=6", "train.val_every=2",
           "train.val_batches=2", "precision.compute=f16"])

    page = os.path.join(work, "report.html")
    run([args.strata, "report", *runs, "--out", page])
    dom = run(chromium(["--dump-dom", f"file://{page}"], work), capture_output=True, text=True).stdout
    screenshot = os.path.join(work, "report.png")
    run(chromium([f"--screenshot={screenshot}", "--window-size=1200,3000", f"file://{page}"], work),
        capture_output=True)

    failures = []
    parsed = PlotLines()
    parsed.feed(dom)
    for metric in REQUIRED_FIGURES + ["planner"]:
        if f"figure-{metric}" not in parsed.ids:
            failures.append(f"no figure-{metric} in the DOM")
    checked = 0
    for index, run_dir in enumerate(runs):
        for metric, count in finite_counts(run_dir).items():
            group = f"plot-{metric}-run{index}"
            if count == 0:
                if group in parsed.lines:
                    failures.append(f"{group}: drawn, but {run_dir}/metrics.jsonl has no {metric}")
                continue
            points = parsed.lines.get(group)
            checked += 1
            if points != count:
                failures.append(f"{group}: {points} points in the DOM, {count} steps with {metric} in metrics.jsonl")
    text = " ".join(" ".join(parsed.text).split())
    for expected in ["precision.compute", "quick switch: every op of the step runs natively",
                     "Kernel time per op type (--profile", "measured / predicted", "this machine"]:
        if expected not in text:
            failures.append(f"the page does not say {expected!r}")
    if not os.path.exists(screenshot) or os.path.getsize(screenshot) < 20000:
        failures.append("Chromium wrote no screenshot of the page")
    for failure in failures:
        print("FAIL:", failure)
    print(f"{checked} lines checked point by point against metrics.jsonl; {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
