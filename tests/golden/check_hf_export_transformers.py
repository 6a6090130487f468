"""`strata export --hf` loaded by transformers itself: the export decodes as it was trained.

For two runs, each a few training steps on a small text:
  - gpt2: a GPT-2 trained on Strata's own SentencePiece BPE tokenizer (`strata data prepare --vocab-size`),
    exported with the tokenizer.json converted from its tokenizer.model;
  - llama: a LLaMA initialised from a HuggingFace directory this script makes with transformers (a
    tokenizer.json trained by `tokenizers`: Metaspace BPE with byte fallback, as LLaMA 2's), exported
    with that tokenizer.json;
`AutoTokenizer` and `AutoModelForCausalLM` load the export (no sentencepiece, no protobuf in the venv),
and must give
  - the ids `strata data tokenize` gives with the run's tokenizer (libsentencepiece for the GPT-2 run),
    over a stress text (runs of spaces, tabs, newlines, accents, CJK, emoji through byte fallback) and over
    the training text and 200 KB of this repository's C++, and decode them back to that text;
  - `strata sample --temperature 0`'s greedy ids and decoded text (spaces kept, no '▁') for a prompt;
  - config.json's bos/eos/pad ids as the tokenizer's, never GPT-2's 50256.
Greedy decoding is a loop of full forward passes here: transformers' generate() imports
torch.distributed.fsdp, which Debian's torch 1.13 cannot import under Python 3.11.

transformers comes from PyPI (a version that supports torch 1.13) in a venv made once over Debian's
python3-torch (hf_venv.py); skipped (exit 77) when torch is missing or the venv cannot be made.

Usage: check_hf_export_transformers.py --strata PATH --repo DIR --work-dir DIR [--venv DIR]
"""

import argparse
import glob
import json
import os
import random
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_venv  # noqa: E402

TRANSFORMERS = "transformers==4.46.3"  # the last line of releases that runs on torch 1.13
DEFAULT_VENV = "/var/tmp/strata-test-transformers"
SAMPLE_TOKENS = 24
PROMPT = "And God said, Let there be"
# Literal "<s>", "</s>" and "<unk>" are left out: transformers (and tokenizers) match special tokens in the
# text, SentencePiece never does.
STRESS = ("And God said, Let there be light: and there was light.\n"
          "  two  spaces,\tone tab,\t\ttwo tabs;\n\n\nthree newlines   then spaces \n"
          "café naïve Ünïcödé — “quotes” 'apostrophes' 12345 67.89\n"
          "中文字符 and 日本語 with emoji 🙂👍🏽 and a ZWJ 👨‍👩‍👧 sequence.\n ends with a space ")


def run(command, **kwargs):
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, command))} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def corpus_text(repo, work):
    """About 150 KB of the default job's KJV text (written by the quick start's own script) and the stress text."""
    path = os.path.join(repo, "data", "kjv.txt")
    if not os.path.exists(path):
        path = os.path.join(work, "kjv.txt")
        run(["bash", os.path.join(repo, "scripts", "default_corpus.sh"), path])
    with open(path, encoding="utf-8") as f:
        kjv = f.read()
    start = len(kjv) // 3
    return kjv[start:start + 150_000] + "\n" + STRESS + "\n"


def code_text(repo, limit=200_000):
    """This repository's C++ sources, full of indented lines and runs of spaces."""
    code = ""
    for path in sorted(glob.glob(os.path.join(repo, "src", "**", "*.cpp"), recursive=True)):
        with open(path, encoding="utf-8") as f:
            code += f.read()
        if len(code) >= limit:
            break
    return code[:limit]


def train_config(work, name, model_lines, vocab_size):
    path = os.path.join(work, f"{name}.toml")
    with open(path, "w") as f:
        f.write(f"[model]\n{model_lines}vocab_size = {vocab_size}\nblock_size = 64\n"
                f'[data]\ndir = "{work}/{name}_corpus"\n[ops]\nbackend = "cpu"\nthreads = 1\n'
                "[train]\nseed = 7\nbatch_size = 8\nglobal_batch = 8\nsteps = 40\nlr = 3e-3\nlr_min = 3e-4\n"
                "warmup_steps = 4\nval_every = 0\n"
                f'[checkpoint]\ndir = "{work}/{name}_run"\nevery = 40\nresume = false\n')
    return path


def prepare_and_train(args, name, text_file, tokenizer_args, model_lines):
    corpus = os.path.join(args.work_dir, f"{name}_corpus")
    run([args.strata, "data", "prepare", text_file, "--out", corpus, *tokenizer_args])
    with open(os.path.join(corpus, "meta.json")) as f:
        vocab_size = json.load(f)["vocab_size"]
    run([args.strata, "train", train_config(args.work_dir, name, model_lines, vocab_size)])
    export = os.path.join(args.work_dir, f"{name}_export")
    run([args.strata, "export", os.path.join(args.work_dir, f"{name}_run"), "--hf", export])
    return corpus, export


def make_llama_directory(directory, text):
    """A LLaMA HuggingFace directory as transformers saves one: a tokenizer.json trained here (Metaspace BPE
    with byte fallback and LLaMA 2's special tokens) and random weights of a tiny untied GQA model."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tokenizer.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                           decoders.Strip(" ", 1, 0)])
    specials = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokenizer.train_from_iterator(text.splitlines(keepends=True), trainers.BpeTrainer(
        vocab_size=600, special_tokens=specials, show_progress=False))
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(directory)
    config = LlamaConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=64, intermediate_size=176,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=128, rms_norm_eps=1e-5, tie_word_embeddings=False,
                         bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(directory, safe_serialization=True)


def greedy(model, prompt_ids, count):
    import torch
    ids = list(prompt_ids)
    with torch.no_grad():
        for _ in range(count):
            ids.append(int(torch.argmax(model(torch.tensor([ids])).logits[0, -1])))
    return ids[len(prompt_ids):]


def check_export(args, name, tokenizer_path, run_dir, export, sample, failures):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(export)
    model = AutoModelForCausalLM.from_pretrained(export).eval()
    with open(os.path.join(export, "config.json")) as f:
        config = json.load(f)
    for key, ours in (("bos_token_id", tokenizer.bos_token_id), ("eos_token_id", tokenizer.eos_token_id),
                      ("pad_token_id", tokenizer.pad_token_id)):
        if config.get(key) != ours:
            failures.append(f"{name}: config.json {key} is {config.get(key)}, the tokenizer's is {ours}")
    if tokenizer.bos_token_id is None or tokenizer.eos_token_id is None:
        failures.append(f"{name}: the exported tokenizer has no bos or eos token")

    for label, text in (("the stress text", STRESS), ("the corpus and code", sample)):
        theirs = tokenizer.encode(text, add_special_tokens=False)
        ours = [int(w) for w in run([args.strata, "data", "tokenize", "--tokenizer", tokenizer_path], input=text).split()]
        if ours != theirs:
            at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
            failures.append(f"{name}: ids of {label} differ at {at} of {len(theirs)}: strata {ours[at:at + 6]}, "
                            f"transformers {theirs[at:at + 6]}")
        if tokenizer.decode(theirs) != text:
            failures.append(f"{name}: {label} does not decode back to itself")
    print(f"{name}: {len(theirs)} ids of {len(sample)} characters of text compared", flush=True)

    printed = run([args.strata, "sample", run_dir, "--prompt", PROMPT, "--tokens", str(SAMPLE_TOKENS),
                   "--temperature", "0", "--ids"])
    text, _, id_line = printed.rstrip("\n").rpartition("\n")
    strata_ids = [int(w) for w in id_line.split()]
    hf_ids = greedy(model, tokenizer.encode(PROMPT, add_special_tokens=False), SAMPLE_TOKENS)
    # Strata's SentencePiece decoding drops control tokens, its tokenizer.json decoding keeps them.
    hf_text = PROMPT + tokenizer.decode(hf_ids, skip_special_tokens=name == "gpt2")
    print(f"{name}: strata {strata_ids}\n{name}: transformers {hf_ids}\n{name}: decoded {hf_text!r}")
    if hf_ids != strata_ids:
        failures.append(f"{name}: greedy ids differ: strata {strata_ids}, transformers {hf_ids}")
    if hf_text != text:
        failures.append(f"{name}: decoded text differs: strata {text!r}, transformers {hf_text!r}")
    if "▁" in hf_text or " " not in hf_text[len(PROMPT):]:
        failures.append(f"{name}: the generated text lost its spaces: {hf_text!r}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strata", required=True)
    parser.add_argument("--repo", required=True, help="the repository root (data/kjv.txt or the script writing it)")
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--venv", default=DEFAULT_VENV)
    args = parser.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        print(f"SKIPPED: {sys.executable} has no torch (apt-get install python3-torch)", flush=True)
        return hf_venv.SKIP_RETURN_CODE
    hf_venv.reexec_in_venv(args.venv, [TRANSFORMERS], "import torch, transformers", system_site_packages=True)
    import transformers
    print(f"transformers {transformers.__version__}, torch {torch.__version__}", flush=True)

    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    text_file = os.path.join(args.work_dir, "corpus.txt")
    with open(text_file, "w", encoding="utf-8") as f:
        f.write(corpus_text(args.repo, args.work_dir))
    with open(text_file, encoding="utf-8") as f:
        sample = f.read() + code_text(args.repo)
    failures = []

    corpus, export = prepare_and_train(args, "gpt2", text_file, ["--vocab-size", "512"],
                                       "n_layer = 2\nn_head = 2\nn_embd = 64\n")
    check_export(args, "gpt2", os.path.join(corpus, "tokenizer.model"), os.path.join(args.work_dir, "gpt2_run"),
                 export, sample, failures)

    hf_dir = os.path.join(args.work_dir, "llama_hf")
    with open(text_file, encoding="utf-8") as f:
        make_llama_directory(hf_dir, f.read())
    corpus, export = prepare_and_train(args, "llama", text_file, ["--tokenizer", hf_dir],
                                       f'family = "llama"\ninit_from = "{hf_dir}"\n')
    check_export(args, "llama", os.path.join(corpus, "tokenizer.json"), os.path.join(args.work_dir, "llama_run"),
                 export, sample, failures)

    for failure in failures:
        print("FAILED:", failure)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
