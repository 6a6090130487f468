"""`strata plan` for one device's work of a model measured on one GPU: the model written as a config, priced as
one device of a data-parallel plan on one node of the cluster (8 ranks, no ZeRO, no recomputation, bf16), so the
device's compute terms are those of the measured run. Shared by compare_layers.py and compare_step.py.
Python 3 standard library only; STRATA=path overrides build/bin/strata."""
import json
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
STRATA = os.environ.get("STRATA", os.path.join(REPO, "build", "bin", "strata"))


def plan_one_device(work, family, n_layer, heads, kv_heads, hidden, ffn, vocab, seq, micro_batch, cluster, extra=()):
    """The plan JSON; `family` is "gpt" or "llama" (as the measurement scripts name them)."""
    family = "gpt2" if family == "gpt" else "llama"
    lines = ["[model]", f'family = "{family}"', f"n_layer = {n_layer}", f"n_head = {heads}", f"n_embd = {hidden}",
             f"vocab_size = {vocab}", f"block_size = {seq}", f"intermediate_size = {ffn}"]
    if family == "llama":
        lines += [f"n_kv_head = {kv_heads}", "tie_word_embeddings = false"]
    path = os.path.join(work, "model.toml")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    out = subprocess.run([STRATA, "plan", path, cluster, "--nodes", "1", "--dp", "8", "--tp", "1", "--pp", "1",
                          "--micro-batch", str(micro_batch), "--global-batch", str(8 * micro_batch), "--dtype", "bf16",
                          "--zero", "0", "--recompute", "none", "--json", "--top", "1", *extra],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)
