"""Interop with HuggingFace transformers itself, both ways (a manual check: it needs a Python with
torch, transformers and sentencepiece from PyPI, which CI does not have; the benchmark's venv can take
them: /var/tmp/strata-bench-torch/bin/pip install transformers sentencepiece).

1. transformers -> Strata: a small random LlamaForCausalLM (grouped-query attention, llama3 rope
   scaling, untied head) and a GPT2LMHeadModel, saved by save_pretrained (sharded safetensors, the
   config spelling of this transformers version) with the corpus's tokenizer.model; `strata sample DIR`
   must give transformers' own greedy continuation, token for token.
2. Strata -> transformers: `strata export --hf` of a checkpoint loads with from_pretrained, and its greedy
   continuation equals `strata sample` of the checkpoint.

Usage: PYTHON scripts/check_transformers_interop.py --strata build/bin/strata --tokenizer data/kjv/tokenizer.model
       [--checkpoint RUN_OR_CHECKPOINT] --work-dir DIR
"""

import argparse
import os
import shutil
import subprocess
import sys

import sentencepiece
import torch
import transformers

PROMPT = "And God said unto Moses"
TOKENS = 16


def strata_sample(strata, source):
    out = subprocess.run([strata, "sample", source, "--prompt", PROMPT, "--tokens", str(TOKENS), "--temperature", "0"],
                         check=True, capture_output=True, text=True).stdout
    return out.rstrip("\n")[len(PROMPT):]


def transformers_sample(model, sp):
    ids = torch.tensor([sp.encode(PROMPT)])
    with torch.no_grad():
        generated = model.generate(ids, max_new_tokens=TOKENS, do_sample=False, pad_token_id=0)
    return sp.decode(generated[0, ids.shape[1]:].tolist())


def random_models(vocab):
    torch.manual_seed(0)
    llama = transformers.LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                     rms_norm_eps=1e-5, tie_word_embeddings=False,
                                     rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
                                     rope_theta=500000.0)
    # A wider initialisation than the default, so greedy decoding does not settle into one repeated token.
    gpt2 = transformers.GPT2Config(vocab_size=vocab, n_positions=256, n_embd=64, n_layer=3, n_head=4,
                                   initializer_range=0.3)
    return {"llama": transformers.LlamaForCausalLM(llama), "gpt2": transformers.GPT2LMHeadModel(gpt2)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strata", required=True)
    parser.add_argument("--tokenizer", required=True, help="the SentencePiece tokenizer.model to pair the models with")
    parser.add_argument("--checkpoint", help="a Strata run or checkpoint to export and load in transformers")
    parser.add_argument("--work-dir", required=True)
    args = parser.parse_args()
    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    sp = sentencepiece.SentencePieceProcessor(model_file=args.tokenizer)
    failures = []
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    for name, model in random_models(sp.get_piece_size()).items():
        directory = os.path.join(args.work_dir, name)
        model.eval()
        model.save_pretrained(directory, max_shard_size="200KB")  # several shards and an index
        shutil.copy(args.tokenizer, os.path.join(directory, "tokenizer.model"))
        theirs, ours = transformers_sample(model, sp), strata_sample(args.strata, directory)
        print(f"{name} from save_pretrained: transformers {theirs!r}\n{'':>{len(name) + 23}}strata {ours!r}")
        if theirs != ours:
            failures.append(f"{name}: strata sample of transformers' directory differs")
    if args.checkpoint:
        exported = os.path.join(args.work_dir, "exported")
        subprocess.run([args.strata, "export", args.checkpoint, "--hf", exported], check=True, capture_output=True)
        model = transformers.AutoModelForCausalLM.from_pretrained(exported)
        model.eval()
        theirs, ours = transformers_sample(model, sp), strata_sample(args.strata, args.checkpoint)
        print(f"export of {args.checkpoint} ({type(model).__name__}): transformers {theirs!r}\n"
              f"{'':>{len(args.checkpoint) + 33}}strata {ours!r}")
        if theirs != ours:
            failures.append("transformers' greedy continuation of the export differs from strata sample's")
    for failure in failures:
        print("FAILED:", failure)
    print("interop " + ("FAILED" if failures else "passed"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
