"""`strata export --hf` against the HuggingFace conventions, read independently.

Trains the golden model (golden_dump, cpu backend), exports its checkpoint with
a shard limit small enough to force several shards, and checks, without
HuggingFace's code (no network here):
  - every weights file by the safetensors format rules (u64 LE header length,
    JSON header space-padded so the data starts 8-aligned, `__metadata__`
    {"format": "pt"}, tensors contiguous from 0 to the end of the file);
  - `model.safetensors.index.json` as huggingface_hub writes it (`weight_map`
    naming each tensor's shard, `total_size` the payload bytes, shards named
    model-0000i-of-0000n.safetensors);
  - `config.json` as GPT2LMHeadModel / LlamaForCausalLM reads it;
  - the tensors equal, bit for bit, the checkpoint's global tensors assembled
    here from its pieces, and the independent PyTorch model (torch_gpt2.py,
    torch_llama.py) built from config.json and those weights gives the loss
    Strata's checkpoint gives (and below the uniform one) on the training tokens.

Usage: check_hf_export.py --strata PATH --dump-tool PATH --work-dir DIR [--model gpt2|llama|llama-tied|llama3]
"""

import argparse
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt2  # noqa: E402
import torch_llama  # noqa: E402

ELEMENT_BYTES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "I64": 8, "I32": 4}


def check_file_format(path, failures):
    with open(path, "rb") as f:
        blob = f.read()
    (header_len,) = struct.unpack("<Q", blob[:8])
    header_text = blob[8:8 + header_len].decode("utf-8")
    if (8 + header_len) % 8 != 0 or not header_text.rstrip(" ").endswith("}"):
        failures.append(f"{path}: the data does not start 8-aligned after a space-padded header")
    header = json.loads(header_text)
    if header.get("__metadata__") != {"format": "pt"}:
        failures.append(f"{path}: __metadata__ is {header.get('__metadata__')}, not {{'format': 'pt'}}")
    entries = sorted((entry["data_offsets"], name, entry) for name, entry in header.items() if name != "__metadata__")
    end = 0
    for (begin, stop), name, entry in entries:
        if begin != end:
            failures.append(f"{path}: tensor '{name}' starts at {begin}, not at {end}")
        if stop - begin != math.prod(entry["shape"]) * ELEMENT_BYTES[entry["dtype"]]:
            failures.append(f"{path}: tensor '{name}' spans {stop - begin} bytes for {entry['dtype']} {entry['shape']}")
        end = stop
    if 8 + header_len + end != len(blob):
        failures.append(f"{path}: the data ends at {8 + header_len + end}, the file at {len(blob)}")
    return {name: entry for name, entry in header.items() if name != "__metadata__"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strata", required=True)
    parser.add_argument("--dump-tool", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--model", default="gpt2", help="golden_dump's model: gpt2, llama, llama-tied, llama3")
    args = parser.parse_args()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    subprocess.run([args.dump_tool, "cpu", args.work_dir, "fp32", args.model], check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(args.work_dir, "golden.json")) as f:
        golden = json.load(f)
    llama = golden["config"]["family"] == "llama"
    ref = torch_llama if llama else torch_gpt2
    out = os.path.join(args.work_dir, "hf")
    # A limit of a fifth of the model: several shards, as a large model gets at 5 GB.
    total = sum(math.prod(shape) * 4 for shape in ref.parameter_shapes(ref.Config.from_golden(golden["config"])).values())
    subprocess.run([args.strata, "export", golden["checkpoint"], "--hf", out, "--max-shard-mb", str(total / 5 / 1e6)],
                   check=True, stdout=subprocess.DEVNULL)

    failures = []
    with open(os.path.join(out, "config.json")) as f:
        config = json.load(f)
    model_type, architecture = ("llama", "LlamaForCausalLM") if llama else ("gpt2", "GPT2LMHeadModel")
    if config.get("model_type") != model_type or config.get("architectures") != [architecture]:
        failures.append(f"config.json names {config.get('model_type')} / {config.get('architectures')}")
    if llama:
        if config.get("hidden_act") != "silu":
            failures.append("config.json: LLaMA's SwiGLU (hidden_act silu) expected")
    elif config.get("activation_function") != "gelu_new" or config.get("tie_word_embeddings") is not True:
        failures.append("config.json: GPT-2's tanh GELU (gelu_new) and tied embeddings expected")
    cfg = ref.Config.from_hf(config)
    # The special ids are the run's tokenizer's (or null), never GPT-2's stock 50256 outside the vocabulary.
    for key in ("bos_token_id", "eos_token_id"):
        if key not in config or not (config[key] is None or 0 <= config[key] < cfg.vocab_size):
            failures.append(f"config.json: {key} {config.get(key, 'missing')} is not an id of the {cfg.vocab_size}-token vocabulary")

    with open(os.path.join(out, "model.safetensors.index.json")) as f:
        index = json.load(f)
    shards = sorted(set(index["weight_map"].values()))
    if len(shards) < 2 or not all(re.fullmatch(rf"model-\d{{5}}-of-{len(shards):05d}\.safetensors", s) for s in shards):
        failures.append(f"shard names {shards}")
    exported = {}
    payload = 0
    for shard in shards:
        entries = check_file_format(os.path.join(out, shard), failures)
        for name in entries:
            if index["weight_map"].get(name) != shard:
                failures.append(f"{name} is in {shard}, the index says {index['weight_map'].get(name)}")
            payload += entries[name]["data_offsets"][1] - entries[name]["data_offsets"][0]
        exported.update(ref.read_safetensors(os.path.join(out, shard)))
    if index["metadata"]["total_size"] != payload:
        failures.append(f"total_size {index['metadata']['total_size']}, payload {payload}")
    shapes = ref.parameter_shapes(cfg)
    if set(exported) != set(shapes) or set(index["weight_map"]) != set(shapes):
        failures.append(f"tensors differ from {architecture}'s: extra {sorted(set(exported) - set(shapes))}, "
                        f"missing {sorted(set(shapes) - set(exported))}")

    saved = ref.read_checkpoint_tensors(golden["checkpoint"])
    for name in shapes:
        if name in exported and not torch.equal(exported[name], saved[name]):
            failures.append(f"{name} differs from the checkpoint's")

    # The golden run's first training batch: the model read from config.json gives what the
    # checkpoint's tensors under golden's own config give, and beats the uniform guess.
    seq = golden["config"]["block_size"]
    inputs, targets = ref.TokenWindows(golden["train_shards"], 2, seq).next()
    loss = ref.loss_of(ref.forward(exported, cfg, inputs.long()), targets.long()).item()
    expected = ref.loss_of(ref.forward(saved, ref.Config.from_golden(golden["config"]), inputs.long()),
                           targets.long()).item()
    if not math.isfinite(loss) or loss >= math.log(cfg.vocab_size) or abs(loss - expected) > 1e-6 * abs(expected):
        failures.append(f"the exported model's loss {loss} is not finite, below uniform {math.log(cfg.vocab_size)} "
                        f"and the checkpoint's {expected}")

    # The directory samples as the checkpoint does: its config, weights and the copied tokenizer.
    if not os.path.exists(os.path.join(out, "tokenizer.model")):
        failures.append("the run's tokenizer.model was not copied into the export")
    sampled = [subprocess.run([args.strata, "sample", source, "--prompt", "The lord said", "--tokens", "12",
                               "--temperature", "0"], check=True, capture_output=True, text=True).stdout
               for source in (golden["checkpoint"], out)]
    if sampled[0] != sampled[1] or not sampled[0].startswith("The lord said"):
        failures.append(f"greedy samples differ: checkpoint {sampled[0]!r}, model directory {sampled[1]!r}")

    print(f"exported {len(exported)} tensors in {len(shards)} shards; loss of the independent {architecture} on them "
          f"{loss:.6f} (the checkpoint's {expected:.6f}, uniform {math.log(cfg.vocab_size):.4f})")
    for failure in failures:
        print("FAILED:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
