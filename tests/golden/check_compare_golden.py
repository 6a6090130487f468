"""Golden test of `strata compare --golden`: tools/torch_dump.py's PyTorch model on Strata's weights
and batch matches Strata cpu fp32 within the f32 tolerance group, and a perturbed dump fails on the
perturbed tensor.

Writes a tiny job (an llm.c token shard, a config), then runs
  strata compare CONFIG --golden-inputs DIR      (initial weights as a HuggingFace directory, the batch)
  python3 tools/torch_dump.py DIR --out DUMP     (PyTorch, independent of Strata's code)
  strata compare CONFIG --golden DUMP --json J   (exit 0, every dumped tensor compared, all f32)
and again with one block output of the dump scaled by 1.001 (exit 3, that tensor the first divergence).
Skipped (exit 77) where torch cannot be imported.

Usage: check_compare_golden.py --strata PATH --tool tools/torch_dump.py --work-dir DIR [--model gpt2|llama]
"""

import argparse
import importlib.util
import json
import os
import shutil
import struct
import subprocess
import sys

try:
    import torch  # noqa: F401
except ImportError as error:
    print(f"SKIPPED: PyTorch is not importable here ({error}); install python3-torch to run this golden test")
    sys.exit(77)

MODELS = {
    "gpt2": "[model]\nn_layer = 2\nn_head = 2\nn_embd = 32\nvocab_size = 320\nblock_size = 16\n",
    "llama": ("[model]\nfamily = \"llama\"\nn_layer = 2\nn_head = 4\nn_kv_head = 2\nn_embd = 32\n"
              "intermediate_size = 64\nvocab_size = 320\nblock_size = 16\ntie_word_embeddings = false\n"
              "rope_scaling = \"llama3\"\nrope_factor = 8.0\nrope_low_freq_factor = 1.0\nrope_high_freq_factor = 4.0\n"
              "rope_original_max_positions = 8\n"),
}
PERTURBED = {"gpt2": "transformer.h.1.attn.residual.forward.out", "llama": "model.layers.1.self_attn.residual.forward.out"}


def write_shard(path, tokens):
    """llm.c's format: 256 little-endian int32 (magic 20240520, version 1, token count), uint16 tokens."""
    header = [20240520, 1, len(tokens)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header) + struct.pack(f"<{len(tokens)}H", *tokens))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strata", required=True)
    parser.add_argument("--tool", required=True, help="tools/torch_dump.py")
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--model", choices=sorted(MODELS), default="gpt2")
    args = parser.parse_args()
    work = args.work_dir
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    tokens = [(i * 7919 + i // 13) % 320 for i in range(4000)]
    for name in ("train.bin", "val.bin"):
        write_shard(os.path.join(work, name), tokens)
    config = os.path.join(work, "tiny.toml")
    with open(config, "w") as f:
        f.write(MODELS[args.model] + f'[data]\ntrain = "{work}/train.bin"\nval = "{work}/val.bin"\n'
                "[ops]\nbackend = \"cpu\"\nthreads = 2\n[train]\nbatch_size = 2\nglobal_batch = 4\nsteps = 10\n"
                f'val_every = 0\n[checkpoint]\ndir = "{work}/run"\nresume = false\n')
    inputs, dump = os.path.join(work, "golden"), os.path.join(work, "dump.safetensors")
    subprocess.run([args.strata, "compare", config, "--golden-inputs", inputs], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, args.tool, inputs, "--out", dump, "--threads", "2"], check=True)

    failures = []
    report = os.path.join(work, "compare.json")
    run = subprocess.run([args.strata, "compare", config, "--golden", dump, "--json", report], capture_output=True, text=True)
    print(run.stdout[-3000:], run.stderr[-2000:])
    with open(report) as f:
        result = json.load(f)
    statuses = {t["status"] for t in result["tensors"]}
    groups = {t.get("group") for t in result["tensors"]}
    if run.returncode != 0 or statuses != {"pass"} or groups != {"f32"}:
        failures.append(f"strata compare --golden exited {run.returncode}; statuses {statuses}, groups {groups}")
    spec = importlib.util.spec_from_file_location("torch_dump", args.tool)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    tensors = tool.read_safetensors(dump)
    if len(result["tensors"]) != len(tensors) - 2:  # all but the batch
        failures.append(f"{len(result['tensors'])} tensors compared, the dump holds {len(tensors) - 2}")

    # One block's output off by 0.1% in the dump: that tensor is the first divergence, and the exit is 3.
    tensors[PERTURBED[args.model]] = tensors[PERTURBED[args.model]] * 1.001
    perturbed = os.path.join(work, "perturbed.safetensors")
    tool.write_safetensors(perturbed, tensors, {"format": "pt"})
    run = subprocess.run([args.strata, "compare", config, "--golden", perturbed, "--json", report], capture_output=True,
                         text=True)
    with open(report) as f:
        first = json.load(f)["first_divergence"]
    if run.returncode != 3 or not first or first["tensor"] != PERTURBED[args.model]:
        failures.append(f"the perturbed dump: exit {run.returncode}, first divergence {first}, expected 3 and "
                        f"{PERTURBED[args.model]}")
    for failure in failures:
        print("FAILED:", failure)
    print(f"{args.model}: {len(result['tensors'])} tensors of PyTorch {torch.__version__} against Strata cpu fp32: "
          f"{'FAIL' if failures else 'pass'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
