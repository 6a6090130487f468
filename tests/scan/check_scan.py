"""strata scan end to end on the fixture projects (fixtures/): every finding against the hand-written
expectation (expected/<fixture>.txt: file, lines, category, severity, API), the model each maps to
against the sizes its source states, the verdict, the CSV/JSON/text formats, --exclude, --rules,
--emit-config, unreadable files, and a generated 100k-line tree (its time is printed, not asserted).

usage: check_scan.py --strata PATH --work-dir DIR"""
import argparse
import csv
import html.parser
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures")
ARGS = None


def strata(*arguments, check=True):
    run = subprocess.run([ARGS.strata, *arguments], capture_output=True, text=True, timeout=300)
    if check and run.returncode != 0:
        raise AssertionError(f"strata {' '.join(arguments)} exited {run.returncode}: {run.stderr}{run.stdout}")
    return run


def scan_json(path, *arguments):
    return json.loads(strata("scan", path, "--format", "json", *arguments).stdout)


def finding_lines(document):
    return [f"{f['file']}:{f['start_line']}-{f['end_line']} {f['category']} {f['severity']} {f['api']}"
            for f in document["findings"]]


def expected_lines(fixture):
    with open(os.path.join(HERE, "expected", f"{fixture}.txt"), encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle if line.strip() and not line.startswith("#")]


def work_dir(name):
    path = os.path.join(ARGS.work_dir, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


class Findings(unittest.TestCase):
    def test_every_fixture_exactly(self):
        for fixture in sorted(os.listdir(FIXTURES)):
            with self.subTest(fixture=fixture):
                self.assertEqual(finding_lines(scan_json(os.path.join(FIXTURES, fixture))), expected_lines(fixture))

    def test_regex_traps(self):
        document = scan_json(os.path.join(FIXTURES, "gpt_cuda"))
        by_line = {}
        for f in document["findings"]:
            by_line.setdefault((f["file"], f["start_line"]), []).append(f)
        # comments, docstrings, a text constant and a message mention cuda: none is code
        for line in (1, 11, 15, 39):
            self.assertNotIn(("train.py", line), by_line)
        self.assertNotIn(("model.py", 1), by_line)
        # the alias: tc.synchronize() is torch.cuda.synchronize
        self.assertEqual([f["api"] for f in by_line[("train.py", 36)]], ["torch.cuda.synchronize"])
        self.assertEqual(by_line[("train.py", 38)][0]["category"], "dynamic")
        self.assertIn("reaches torch.cuda", by_line[("train.py", 38)][0]["tip"])

    def test_single_file(self):
        document = scan_json(os.path.join(FIXTURES, "gpt_cuda", "train.py"))
        expected = [line for line in expected_lines("gpt_cuda") if line.startswith("train.py:")]
        self.assertEqual(finding_lines(document), expected)


class ModelsAndVerdicts(unittest.TestCase):
    def check(self, fixture, family, keys, answer):
        document = scan_json(os.path.join(FIXTURES, fixture))
        model = document["model"]
        self.assertEqual(model["family"], family, model)
        config = tomllib.loads(model["config"])
        for key, value in keys.items():
            self.assertEqual(config["model"][key], value, key)
        self.assertEqual(document["verdict"]["answer"], answer, document["verdict"]["why"])
        return document

    def test_structural_gpt(self):
        # GPTConfig(n_layer=6, n_head=6, n_embd=384, block_size=256) over the dataclass's vocab_size=50304
        document = self.check("gpt_cuda", "gpt2", {"n_layer": 6, "n_head": 6, "n_embd": 384, "block_size": 256,
                                                   "vocab_size": 50304}, "needs changes")
        self.assertEqual(document["verdict"]["precision"], "f16")  # the project's torch.float16 autocast
        self.assertEqual(document["verdict"]["blockers"], [])
        counts = {c["api"]: c["count"] for c in document["verdict"]["changes"]}
        self.assertEqual(counts["'LOCAL_RANK'"], 2)
        self.assertEqual(counts["torch.nn.parallel.DistributedDataParallel"], 2)

    def test_transformers_config_class(self):
        # LlamaConfig's keywords, and transformers' LlamaConfig defaults for the rest (rms_norm_eps 1e-6)
        self.check("llama_kernels", "llama", {"n_layer": 8, "n_head": 16, "n_kv_head": 4, "n_embd": 1024,
                                              "intermediate_size": 2816, "vocab_size": 32000, "block_size": 2048,
                                              "layer_norm_eps": 1e-6, "tie_word_embeddings": False}, "rewrite")

    def test_from_pretrained_name(self):
        # HuggingFace's gpt2: 12 layers, 12 heads, 768 wide, 50257 tokens, 1024 positions
        document = self.check("hf_quick", "gpt2", {"n_layer": 12, "n_head": 12, "n_embd": 768, "vocab_size": 50257,
                                                   "block_size": 1024}, "quick switch")
        self.assertEqual(document["summary"]["findings"], 0)

    def test_known_llama_name(self):
        # meta-llama/Meta-Llama-3-8B's config.json: hidden 4096, 32 layers, 32 heads, 8 key/value heads,
        # SwiGLU 14336, 128256 tokens, rope_theta 500000, 8192 positions, untied
        root = work_dir("known_llama")
        with open(os.path.join(root, "finetune.py"), "w", encoding="utf-8") as handle:
            handle.write("from transformers import LlamaForCausalLM\n\n"
                         "model = LlamaForCausalLM.from_pretrained('meta-llama/Meta-Llama-3-8B-Instruct')\n")
        document = scan_json(root, "--precision", "bf16")
        config = tomllib.loads(document["model"]["config"])
        expected = {"family": "llama", "n_embd": 4096, "n_layer": 32, "n_head": 32, "n_kv_head": 8,
                    "intermediate_size": 14336, "vocab_size": 128256, "rope_theta": 500000.0, "block_size": 8192,
                    "tie_word_embeddings": False}
        self.assertEqual({k: config["model"][k] for k in expected}, expected)
        self.assertEqual(config["precision"]["compute"], "bf16")
        self.assertEqual(document["model"]["config_error"], "")
        path = os.path.join(root, "llama3.toml")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(document["model"]["config"])
        ops = json.loads(strata("ops", path, "--json").stdout)  # no findings: the ops verdict decides
        self.assertEqual(document["verdict"]["answer"], "quick switch" if ops["verdict"]["quick_switch"] else "needs changes")

    def test_structural_llama(self):
        # ModelArgs' defaults; the SwiGLU width by LLaMA's rule: 256 * ceil(int(2 * 4 * 512 / 3) / 256) = 1536
        document = scan_json(os.path.join(FIXTURES, "llama_module"))
        config = tomllib.loads(document["model"]["config"])
        expected = {"family": "llama", "n_layer": 8, "n_head": 8, "n_kv_head": 4, "n_embd": 512, "vocab_size": 32000,
                    "block_size": 1024, "intermediate_size": 1536, "layer_norm_eps": 1e-5}
        self.assertEqual({k: config["model"][k] for k in expected}, expected)
        self.assertEqual(config["precision"]["compute"], "bf16")  # the project's .to(torch.bfloat16)
        # nothing to change in the code: the verdict is the op coverage's, asked of `strata ops` itself
        path = os.path.join(work_dir("llama_module"), "llama.toml")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(document["model"]["config"])
        ops = json.loads(strata("ops", path, "--json").stdout)
        expected_answer = "quick switch" if ops["verdict"]["quick_switch"] else "needs changes"
        self.assertEqual(document["verdict"]["answer"], expected_answer)

    def test_unsupported_architecture(self):
        document = scan_json(os.path.join(FIXTURES, "mistral_json"))
        self.assertFalse(document["model"]["supported"])
        self.assertIn("sliding-window", document["model"]["reason"])
        self.assertEqual(document["verdict"]["answer"], "rewrite")

    def test_encoder_is_not_a_decoder_family(self):
        # the parts of a GPT (two or more embeddings, LayerNorm, GELU, blocks, a head) but no causal mask
        document = scan_json(os.path.join(FIXTURES, "encoder_module"))
        self.assertFalse(document["model"]["supported"])
        self.assertIn("without a causal mask", document["model"]["reason"])
        self.assertEqual(document["verdict"]["answer"], "rewrite")

    def test_two_models_with_a_shared_class_name(self):
        # a GPT and a LLaMA whose block classes are both called Block: each is followed in its own file
        root = work_dir("two_models")
        shutil.copytree(os.path.join(FIXTURES, "gpt_cuda"), os.path.join(root, "a_gpt"))
        os.makedirs(os.path.join(root, "b_llama"))
        with open(os.path.join(FIXTURES, "llama_module", "model.py"), encoding="utf-8") as source:
            text = source.read().replace("TransformerBlock", "Block")
        with open(os.path.join(root, "b_llama", "model.py"), "w", encoding="utf-8") as target:
            target.write(text)
        model = scan_json(root)["model"]
        self.assertEqual((model["family"], model["evidence"]), ("gpt2", "class GPT at a_gpt/model.py:65"))
        self.assertEqual(model["also_found"], ["class Transformer at b_llama/model.py:75 (llama)"])
        config = tomllib.loads(model["config"])["model"]
        self.assertEqual((config["n_layer"], config["n_embd"], config["vocab_size"]), (6, 384, 50304))

    def test_sizes_not_in_the_project_are_named(self):
        root = work_dir("no_sizes")
        with open(os.path.join(FIXTURES, "gpt_cuda", "model.py"), encoding="utf-8") as source:
            text = source.read().replace("    block_size: int = 1024\n", "").replace("    n_layer: int = 12\n", "")
        with open(os.path.join(root, "model.py"), "w", encoding="utf-8") as target:
            target.write(text)
        document = scan_json(root)
        self.assertEqual(document["model"]["missing"], ["n_layer", "block_size"])
        self.assertEqual(document["verdict"]["answer"], "needs changes")

    def test_emit_config_loads(self):
        path = os.path.join(work_dir("emit"), "gpt2.toml")
        strata("scan", os.path.join(FIXTURES, "hf_quick"), "--emit-config", path, "--backend", "ref")
        with open(path, "rb") as handle:
            config = tomllib.load(handle)
        self.assertEqual(config["ops"]["backend"], "ref")
        ops = json.loads(strata("ops", path, "--json").stdout)
        self.assertEqual(ops["family"], "gpt2")
        refused = strata("scan", os.path.join(FIXTURES, "mistral_json"), "--emit-config", path + ".x", check=False)
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn("sliding-window", refused.stderr + refused.stdout)



def write_json(directory, name, document):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name), "w", encoding="utf-8") as handle:
        json.dump(document, handle)


def ops_of(config_text, path):
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(config_text)
    return json.loads(strata("ops", path, "--json", "--precision", "f32").stdout)


# Tiny Qwen2-MoE and OLMoE config.json files as save_pretrained writes them (every key present).
QWEN2_MOE_JSON = {"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "vocab_size": 384,
                  "hidden_size": 48, "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4,
                  "num_key_value_heads": 4, "hidden_act": "silu", "max_position_embeddings": 128,
                  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": False,
                  "use_sliding_window": False, "sliding_window": 4096, "max_window_layers": 21,
                  "decoder_sparse_step": 1, "moe_intermediate_size": 24, "shared_expert_intermediate_size": 96,
                  "num_experts": 6, "num_experts_per_tok": 2, "norm_topk_prob": False, "output_router_logits": False,
                  "router_aux_loss_coef": 0.001, "mlp_only_layers": []}
OLMOE_JSON = {"architectures": ["OlmoeForCausalLM"], "model_type": "olmoe", "vocab_size": 320, "hidden_size": 32,
              "intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
              "hidden_act": "silu", "max_position_embeddings": 64, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
              "attention_bias": False, "clip_qkv": None, "num_experts": 8, "num_experts_per_tok": 2,
              "norm_topk_prob": False, "output_router_logits": True, "router_aux_loss_coef": 0.01,
              "tie_word_embeddings": False}
# The [model] keys Strata's config.json reader sets for every MoE family (read_llama_attention_keys and
# moe_from_hf_config in src/model), and those it sets for some.
READER_KEYS = {"n_layer", "n_head", "n_kv_head", "n_embd", "vocab_size", "max_position_embeddings", "block_size",
               "layer_norm_eps", "rope_theta", "tie_word_embeddings", "num_experts", "num_experts_per_tok",
               "moe_intermediate_size", "router_aux_loss_coef"}
READER_FAMILY_KEYS = {"mixtral": set(), "qwen3_moe": {"norm_topk_prob", "intermediate_size", "attention_bias"},
                      "qwen2_moe": {"norm_topk_prob", "intermediate_size", "attention_bias",
                                    "shared_expert_intermediate_size"},
                      "olmoe": {"norm_topk_prob", "attention_bias"}}


class MixtureOfExperts(unittest.TestCase):
    def agrees_with_strata_reader(self, model, hf_dir, name):
        """The emitted [model] keys, each, as Strata's own config.json reader reads hf_dir (init_from fails
        naming any key that differs), and the same training step as the reader's model alone."""
        directory = work_dir(f"moe_reader_{name}")
        emitted = model["config"]
        self.assertLessEqual(READER_KEYS | READER_FAMILY_KEYS[model["family"]], set(tomllib.loads(emitted)["model"]))
        pinned = emitted.replace("[model]\n", f"[model]\ninit_from = {json.dumps(hf_dir)}\n", 1)
        ops_of(pinned, os.path.join(directory, "pinned.toml"))
        alone = ops_of(emitted, os.path.join(directory, "emitted.toml"))
        reader = ops_of(f"[model]\ninit_from = {json.dumps(hf_dir)}\n\n[data]\ndir = \"data/corpus\"\n",
                        os.path.join(directory, "reader.toml"))
        self.assertEqual((alone["family"], alone["ops"], alone["step_flops"]),
                         (reader["family"], reader["ops"], reader["step_flops"]))

    def test_from_pretrained_local_mixtral(self):
        # mixtral_tiny/config.json: 2 layers, 4 heads (2 key/value), 64 wide, 4 experts of width 96, top-2,
        # the load-balancing loss on at 0.02; every key given, none assumed
        document = scan_json(os.path.join(FIXTURES, "moe_hf"))
        model = document["model"]
        self.assertEqual((model["family"], model["assumed"]), ("mixtral", []))
        config = tomllib.loads(model["config"])["model"]
        expected = {"n_layer": 2, "n_head": 4, "n_kv_head": 2, "n_embd": 64, "vocab_size": 512, "block_size": 256,
                    "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 96, "rope_theta": 1e6,
                    "router_aux_loss_coef": 0.02, "tie_word_embeddings": False}
        self.assertEqual({k: config[k] for k in expected}, expected)
        self.assertNotIn("norm_topk_prob", config)  # Mixtral always renormalises; not a key of its config.json
        self.assertEqual(model["also_found"], ["mixtral_tiny/config.json (mixtral)",
                                               "transformers.Qwen3MoeConfig(...) at ablation.py:5 (qwen3_moe)"])
        self.assertEqual(model["config_error"], "")
        self.assertEqual(document["verdict"]["precision"], "bf16")  # torch_dtype=torch.bfloat16
        self.assertEqual(document["verdict"]["answer"], "needs changes")  # .cuda() and device="cuda"
        self.agrees_with_strata_reader(model, os.path.join(FIXTURES, "moe_hf", "mixtral_tiny"), "mixtral")

    def test_config_class_with_transformers_defaults(self):
        # Qwen3MoeConfig's keywords in ablation.py; transformers' Qwen3MoeConfig defaults for the rest
        root = work_dir("qwen3_moe_class")
        shutil.copy(os.path.join(FIXTURES, "moe_hf", "ablation.py"), root)
        model = scan_json(root)["model"]
        self.assertEqual(model["family"], "qwen3_moe", model)
        config = tomllib.loads(model["config"])["model"]
        expected = {"n_layer": 2, "n_head": 4, "n_kv_head": 2, "head_dim": 16, "n_embd": 64, "vocab_size": 512,
                    "block_size": 256, "intermediate_size": 192, "moe_intermediate_size": 32, "num_experts": 8,
                    "num_experts_per_tok": 2, "norm_topk_prob": True, "layer_norm_eps": 1e-6, "rope_theta": 10000.0,
                    "attention_bias": False, "tie_word_embeddings": False, "router_aux_loss_coef": 0.0}
        self.assertEqual({k: config[k] for k in expected}, expected)
        self.assertEqual(sorted(model["assumed"]), ["attention_bias", "layer_norm_eps", "rope_theta",
                                                    "router_aux_loss_coef", "tie_word_embeddings"])
        # the same keywords as a config.json (transformers' defaults written out), read by Strata
        keywords = {"model_type": "qwen3_moe", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 192,
                    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                    "max_position_embeddings": 256, "moe_intermediate_size": 32, "num_experts": 8,
                    "num_experts_per_tok": 2, "norm_topk_prob": True, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
                    "attention_bias": False, "tie_word_embeddings": False, "output_router_logits": False}
        write_json(os.path.join(root, "hf"), "config.json", keywords)
        self.agrees_with_strata_reader(model, os.path.join(root, "hf"), "qwen3_moe")

    def test_qwen2_moe_and_olmoe_config_json(self):
        for name, hf, family_keys in (
                ("qwen2_moe", QWEN2_MOE_JSON, {"shared_expert_intermediate_size": 96, "attention_bias": True,
                                               "router_aux_loss_coef": 0.0, "moe_intermediate_size": 24}),
                ("olmoe", OLMOE_JSON, {"moe_intermediate_size": 16, "router_aux_loss_coef": 0.01,
                                       "norm_topk_prob": False})):
            with self.subTest(family=name):
                root = work_dir(f"{name}_json")
                write_json(os.path.join(root, "checkpoint"), "config.json", hf)
                model = scan_json(root)["model"]
                self.assertEqual((model["family"], model["assumed"], model["config_error"]), (name, [], ""), model)
                config = tomllib.loads(model["config"])["model"]
                self.assertEqual({k: config[k] for k in family_keys}, family_keys)
                self.agrees_with_strata_reader(model, os.path.join(root, "checkpoint"), name)

    def test_what_strata_refuses_is_refused(self):
        with open(os.path.join(FIXTURES, "moe_hf", "mixtral_tiny", "config.json"), encoding="utf-8") as handle:
            mixtral = json.load(handle)
        cases = [("mixtral", {**mixtral, "sliding_window": 128}, "sliding_window 128 is shorter"),
                 ("mixtral", {**mixtral, "router_jitter_noise": 0.01}, "router_jitter_noise 0.01 makes routing random"),
                 ("qwen2_moe", {**QWEN2_MOE_JSON, "decoder_sparse_step": 2}, "decoder_sparse_step 2 makes some layers dense"),
                 ("qwen2_moe", {**QWEN2_MOE_JSON, "mlp_only_layers": [0]}, "mlp_only_layers [0] makes those layers dense"),
                 ("qwen2_moe", {**QWEN2_MOE_JSON, "use_sliding_window": True}, "use_sliding_window is true"),
                 ("olmoe", {**OLMOE_JSON, "clip_qkv": 8.0}, "clip_qkv 8.0"),
                 ("olmoe", {**OLMOE_JSON, "hidden_act": "gelu"}, "hidden_act 'gelu' is not SwiGLU's 'silu'")]
        for index, (name, hf, why) in enumerate(cases):
            with self.subTest(why=why):
                root = work_dir(f"moe_refused_{index}")
                write_json(os.path.join(root, "checkpoint"), "config.json", hf)
                document = scan_json(root)
                self.assertFalse(document["model"]["supported"])
                self.assertIn(f"model type '{name}': {why}", document["model"]["reason"])
                self.assertEqual(document["verdict"]["answer"], "rewrite")
                path = os.path.join(root, "reader.toml")  # Strata's own reader refuses the same file
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write(f"[model]\ninit_from = {json.dumps(os.path.join(root, 'checkpoint'))}\n")
                refused = strata("ops", path, check=False)
                self.assertNotEqual(refused.returncode, 0)
                self.assertIn(why.split()[0], refused.stderr)

    def test_known_moe_names(self):
        # the Hub's config.json of each: Mixtral-8x7B 32 layers, 4096 wide, 8 experts of 14336, top-2,
        # rope_theta 1e6; Qwen3-30B-A3B 48 layers, 32 heads (4 key/value) of 128, 128 experts of 768, top-8,
        # renormalised; OLMoE-1B-7B 16 layers, 2048 wide, 64 experts of 1024, top-8
        for name, expected in (
                ("mistralai/Mixtral-8x7B-Instruct-v0.1", {"family": "mixtral", "n_layer": 32, "n_embd": 4096,
                                                          "num_experts": 8, "num_experts_per_tok": 2,
                                                          "moe_intermediate_size": 14336, "rope_theta": 1e6}),
                ("Qwen/Qwen3-30B-A3B", {"family": "qwen3_moe", "n_layer": 48, "n_head": 32, "n_kv_head": 4,
                                        "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8,
                                        "moe_intermediate_size": 768, "norm_topk_prob": True}),
                ("allenai/OLMoE-1B-7B-0924", {"family": "olmoe", "n_layer": 16, "n_embd": 2048, "num_experts": 64,
                                              "num_experts_per_tok": 8, "moe_intermediate_size": 1024})):
            with self.subTest(name=name):
                root = work_dir("known_moe")
                with open(os.path.join(root, "finetune.py"), "w", encoding="utf-8") as handle:
                    handle.write(f"from transformers import AutoModelForCausalLM\n\n"
                                 f"model = AutoModelForCausalLM.from_pretrained({name!r})\n")
                model = scan_json(root)["model"]
                self.assertEqual(model["config_error"], "", model)
                config = tomllib.loads(model["config"])["model"]
                self.assertEqual({k: config[k] for k in expected}, expected)

    def test_mistral_stays_unsupported(self):
        reason = scan_json(os.path.join(FIXTURES, "mistral_json"))["model"]["reason"]
        self.assertEqual(reason, "model type 'mistral': sliding-window attention (Strata's families are gpt2, llama, "
                                 "mixtral, qwen2_moe, qwen3_moe and olmoe)")

class Formats(unittest.TestCase):
    def test_csv(self):
        path = os.path.join(work_dir("csv"), "scan.csv")
        run = strata("scan", os.path.join(FIXTURES, "gpt_cuda"), "--format", "csv", "--out", path)
        self.assertIn("verdict on backend 'cpu' in f16: needs changes", run.stdout)  # the summary still prints
        with open(path, newline="", encoding="utf-8") as handle:
            rows = list(csv.reader(handle))
        self.assertEqual(rows[0], ["File", "Start Line", "End Line", "API", "Tips", "Category", "Severity", "Reason"])
        document = scan_json(os.path.join(FIXTURES, "gpt_cuda"))
        self.assertEqual(rows[1:], [[f["file"], str(f["start_line"]), str(f["end_line"]), f["api"], f["tip"],
                                     f["category"], f["severity"], f["reason"]] for f in document["findings"]])

    def test_text_summary_first(self):
        text = strata("scan", os.path.join(FIXTURES, "llama_kernels")).stdout
        lines = text.splitlines()
        self.assertTrue(lines[0].startswith("strata scan of "), lines[0])
        self.assertIn("by severity:  18 blocks", text)
        self.assertIn("files with most findings:  model.py (7)  csrc/scale.cu (4)  setup.py (4)", text)
        self.assertLess(text.index("verdict on backend 'cpu' in f32: rewrite"), text.index("findings:\n"))
        self.assertIn("model.py:21-24: @triton.jit [extension, blocks]", text)
        self.assertEqual(lines[-1], "verdict on backend 'cpu' in f32: rewrite")  # and last, after the findings

    def test_json_summary(self):
        summary = scan_json(os.path.join(FIXTURES, "gpt_cuda"))["summary"]
        self.assertEqual(summary["by_category"], {"cuda": 9, "distributed": 6, "dynamic": 2, "precision": 4, "shapes": 5})
        self.assertEqual(summary["by_severity"], {"change": 16, "info": 1, "risk": 9})
        self.assertEqual(summary["top_files"][0], {"file": "train.py", "findings": 21})


class TableRows(html.parser.HTMLParser):
    """Every table row's cell texts, and the text of the element with id scan-verdict."""

    def __init__(self):
        super().__init__()
        self.rows, self.cell, self.verdict, self.in_verdict = [], None, "", False

    def handle_starttag(self, tag, attributes):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self.cell = ""
        self.in_verdict = dict(attributes).get("id") == "scan-verdict"

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.rows[-1].append(self.cell)
            self.cell = None
        self.in_verdict = False

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data
        if self.in_verdict:
            self.verdict += data


class Report(unittest.TestCase):
    def test_scan_section(self):
        directory = work_dir("report")
        scan, page = os.path.join(directory, "scan.json"), os.path.join(directory, "report.html")
        strata("scan", os.path.join(FIXTURES, "llama_kernels"), "--format", "json", "--out", scan)
        strata("report", "--scan", scan, "--out", page)
        with open(scan, encoding="utf-8") as handle:
            document = json.load(handle)
        parser = TableRows()
        with open(page, encoding="utf-8") as handle:
            parser.feed(handle.read())
        self.assertEqual(parser.verdict, "backend cpu, f32: rewrite")
        severities = ["blocks", "change", "risk", "info"]
        expected = {}
        for f in document["findings"]:
            expected.setdefault(f["category"], [0] * 4)[severities.index(f["severity"])] += 1
        shown = {row[0]: [int(v) for v in row[1:]] for row in parser.rows if len(row) == 5 and row[0] in expected}
        self.assertEqual(shown, expected)

    def test_damaged_scan_names_the_key(self):
        directory = work_dir("report_damaged")
        scan = os.path.join(directory, "scan.json")
        with open(scan, "w", encoding="utf-8") as handle:
            json.dump({"root": "x", "files_scanned": 1, "lines_scanned": 1, "findings": [],
                       "summary": {"findings": 0, "unreadable": 0, "top_files": []}}, handle)
        run = strata("report", "--scan", scan, "--out", os.path.join(directory, "r.html"), check=False)
        self.assertEqual(run.returncode, 1)
        self.assertIn("scan.json': verdict", run.stderr + run.stdout)
        run = strata("report", "--out", os.path.join(directory, "r.html"), check=False)
        self.assertIn("give run directories, --scan SCAN.json, or both", run.stderr + run.stdout)


class Options(unittest.TestCase):
    def test_exclude(self):
        root = os.path.join(FIXTURES, "llama_kernels")
        expected = [line for line in expected_lines("llama_kernels") if not line.startswith(("third_party/", "csrc/scale.cu"))]
        self.assertEqual(finding_lines(scan_json(root, "--exclude", "third_party", "--exclude", "*.cu")), expected)
        self.assertEqual(finding_lines(scan_json(root, "--exclude", "third_party/vendored/*", "--exclude", "*.cu")), expected)

    def test_a_rule_is_a_line(self):
        path = os.path.join(work_dir("rules"), "mine.toml")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write('version = 1\ncategory = "house"\nnames = [\n'
                         '  { name = "torch.optim.AdamW", severity = "info", reason = "r", tip = "train.lr" },\n]\n')
        document = scan_json(os.path.join(FIXTURES, "gpt_cuda"), "--rules", path)
        added = [f for f in document["findings"] if f["category"] == "house"]
        self.assertEqual([(f["file"], f["start_line"], f["api"]) for f in added], [("train.py", 30, "torch.optim.AdamW")])
        with open(path, "w", encoding="utf-8") as handle:
            handle.write('version = 1\ncategory = "house"\nnames = [ { name = "x", severity = "info", reason = "r" } ]\n')
        run = strata("scan", os.path.join(FIXTURES, "gpt_cuda"), "--rules", path, check=False)
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("mine.toml': names[0]: 'tip' must be a non-empty string", run.stderr)

    def test_bad_input(self):
        run = strata("scan", os.path.join(ARGS.work_dir, "no-such-project"), check=False)
        self.assertEqual(run.returncode, 1)
        self.assertIn("does not exist", run.stderr + run.stdout)
        run = strata("scan", FIXTURES, "--backend", "no-such-backend", check=False)
        self.assertEqual(run.returncode, 1)
        self.assertIn("no-such-backend", run.stderr + run.stdout)


class Robustness(unittest.TestCase):
    def test_unreadable_files_are_reported_and_the_scan_goes_on(self):
        root = os.path.join(work_dir("unreadable"), "project")
        shutil.copytree(os.path.join(FIXTURES, "unreadable"), root)
        with open(os.path.join(root, "huge.py"), "w", encoding="utf-8") as handle:
            handle.write("x = 1\n" * 300000)  # 1.7 MiB
        with open(os.path.join(root, "deep.py"), "w", encoding="utf-8") as handle:
            handle.write("x = " + "1 + " * 100000 + "1\n")
        with open(os.path.join(root, "chain.py"), "w", encoding="utf-8") as handle:
            handle.write("x = " + "1 + " * 9000 + "1\nimport torch\ntorch.cuda.synchronize()\n")  # deep, but read
        with open(os.path.join(os.fsencode(root), b"caf\xe9.py"), "wb") as handle:  # a name that is not UTF-8
            handle.write(b"import torch\ntorch.cuda.synchronize()\n")
        document = scan_json(root, "--max-file-mb", "1")
        reasons = {u["file"]: u["reason"] for u in document["unreadable"]}
        self.assertEqual(sorted(reasons), ["blob.py", "broken.py", "deep.py", "huge.py", "legacy.py"])
        self.assertIn("binary data", reasons["blob.py"])
        self.assertIn("not valid Python 3: invalid syntax (line 1)", reasons["broken.py"])
        self.assertIn("looks like Python 2", reasons["legacy.py"])
        self.assertIn("larger than the limit of 1 MiB", reasons["huge.py"])
        self.assertIn("nested too deeply", reasons["deep.py"])
        self.assertEqual(finding_lines(document), ["caf?.py:2-2 cuda change torch.cuda.synchronize",
                                                   "chain.py:3-3 cuda change torch.cuda.synchronize"]
                         + expected_lines("unreadable"))
        self.assertEqual(document["verdict"]["answer"], "needs changes")


class Speed(unittest.TestCase):
    def test_100k_lines(self):
        """A tree of copies of the Python fixtures: each copy's findings, exactly, and the time it took."""
        sources = [("gpt_cuda", "train.py"), ("gpt_cuda", "model.py"), ("gpt_cuda", "data.py"),
                   ("llama_kernels", "model.py"), ("llama_module", "model.py")]
        root = work_dir("tree_100k")
        lines = copies = 0
        while lines < 100000:
            for fixture, name in sources:
                target = os.path.join(root, f"package{copies:04d}", fixture)
                os.makedirs(target, exist_ok=True)
                shutil.copy(os.path.join(FIXTURES, fixture, name), target)
                with open(os.path.join(target, name), encoding="utf-8") as handle:
                    lines += sum(1 for _ in handle)
            copies += 1
        started = time.monotonic()
        document = scan_json(root)
        seconds = time.monotonic() - started
        per_copy = sum(1 for line in expected_lines("gpt_cuda") + expected_lines("llama_kernels") + expected_lines("llama_module")
                       if line.split(":")[0] in ("train.py", "model.py", "data.py"))
        self.assertEqual(len(document["findings"]), copies * per_copy)
        self.assertEqual(document["lines_scanned"], lines)
        print(f"\nscan of {lines} Python lines in {document['files_scanned']} files: {seconds:.2f} s "
              f"(the scanner's own {document['seconds']:.2f} s)", file=sys.stderr)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--strata", required=True)
    parser.add_argument("--work-dir", required=True)
    ARGS, rest = parser.parse_known_args()
    os.makedirs(ARGS.work_dir, exist_ok=True)
    unittest.main(argv=[sys.argv[0], "-v", *rest])
