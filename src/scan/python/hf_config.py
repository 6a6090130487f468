"""A HuggingFace config (config.json, or a transformers config class's keywords) as Strata's
[model] keys, with transformers' own defaults for keys not given (listed as assumed). The
mixture-of-experts families follow Strata's own config.json reader (src/model/moe/moe_hf_config.cpp)
key for key, and refuse what it refuses."""

GPT2_DEFAULTS = {"vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12,
                 "layer_norm_epsilon": 1e-5}
LLAMA_DEFAULTS = {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                  "num_attention_heads": 32, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
                  "rope_theta": 10000.0, "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False}
# transformers' MixtralConfig, Qwen2MoeConfig, Qwen3MoeConfig and OlmoeConfig defaults.
MIXTRAL_DEFAULTS = {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                    "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 4096 * 32,
                    "rms_norm_eps": 1e-5, "rope_theta": 1e6, "tie_word_embeddings": False, "num_local_experts": 8,
                    "num_experts_per_tok": 2}
QWEN2_MOE_DEFAULTS = {"vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 24,
                      "num_attention_heads": 16, "num_key_value_heads": 16, "max_position_embeddings": 32768,
                      "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False, "num_experts": 60,
                      "num_experts_per_tok": 4, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
                      "norm_topk_prob": False}
QWEN3_MOE_DEFAULTS = {"vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 24,
                      "num_attention_heads": 32, "num_key_value_heads": 4, "max_position_embeddings": 32768,
                      "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False,
                      "attention_bias": False, "num_experts": 128, "num_experts_per_tok": 8,
                      "moe_intermediate_size": 768, "norm_topk_prob": False}
OLMOE_DEFAULTS = {"vocab_size": 50304, "hidden_size": 2048, "intermediate_size": 2048, "num_hidden_layers": 16,
                  "num_attention_heads": 16, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
                  "rope_theta": 10000.0, "tie_word_embeddings": False, "attention_bias": False, "num_experts": 64,
                  "num_experts_per_tok": 8, "norm_topk_prob": False}
# The router's load-balancing loss counts only under output_router_logits (Strata: router_aux_loss_coef 0 = off).
AUX_LOSS_DEFAULTS = {"mixtral": 0.001, "qwen2_moe": 0.001, "qwen3_moe": 0.001, "olmoe": 0.01}

GPT2_KEYS = {"n_layer": "n_layer", "n_head": "n_head", "n_embd": "n_embd", "vocab_size": "vocab_size",
             "n_positions": "max_position_embeddings", "layer_norm_epsilon": "layer_norm_eps"}
ATTENTION_KEYS = {"num_hidden_layers": "n_layer", "num_attention_heads": "n_head", "num_key_value_heads": "n_kv_head",
                  "hidden_size": "n_embd", "vocab_size": "vocab_size", "max_position_embeddings": "max_position_embeddings",
                  "rms_norm_eps": "layer_norm_eps", "rope_theta": "rope_theta",
                  "tie_word_embeddings": "tie_word_embeddings", "attention_bias": "attention_bias", "head_dim": "head_dim"}
LLAMA_KEYS = {**ATTENTION_KEYS, "intermediate_size": "intermediate_size", "mlp_bias": "mlp_bias"}
ROUTER_KEYS = {"num_experts": "num_experts", "num_experts_per_tok": "num_experts_per_tok",
               "moe_intermediate_size": "moe_intermediate_size"}
# Mixtral names its expert count and width num_local_experts and intermediate_size, and always renormalises
# the top-k weights (Strata's mixtral family too, whatever model.norm_topk_prob says).
MIXTRAL_KEYS = {**ATTENTION_KEYS, "num_local_experts": "num_experts", "num_experts_per_tok": "num_experts_per_tok",
                "intermediate_size": "moe_intermediate_size"}
# Qwen's intermediate_size is the width of dense layers Strata does not build: kept, as Strata's reader keeps it.
QWEN3_MOE_KEYS = {**ATTENTION_KEYS, **ROUTER_KEYS, "intermediate_size": "intermediate_size",
                  "norm_topk_prob": "norm_topk_prob"}
QWEN2_MOE_KEYS = {**QWEN3_MOE_KEYS, "shared_expert_intermediate_size": "shared_expert_intermediate_size"}
OLMOE_KEYS = {**ATTENTION_KEYS, "num_experts": "num_experts", "num_experts_per_tok": "num_experts_per_tok",
              "intermediate_size": "moe_intermediate_size", "norm_topk_prob": "norm_topk_prob"}
FAMILIES = {"gpt2": (GPT2_DEFAULTS, GPT2_KEYS), "llama": (LLAMA_DEFAULTS, LLAMA_KEYS),
            "mixtral": (MIXTRAL_DEFAULTS, MIXTRAL_KEYS), "qwen2_moe": (QWEN2_MOE_DEFAULTS, QWEN2_MOE_KEYS),
            "qwen3_moe": (QWEN3_MOE_DEFAULTS, QWEN3_MOE_KEYS), "olmoe": (OLMOE_DEFAULTS, OLMOE_KEYS)}
FAMILY_LIST = ", ".join(list(FAMILIES)[:-1]) + " and " + list(FAMILIES)[-1]
CLASS_TYPES = {"GPT2Config": "gpt2", "LlamaConfig": "llama", "MixtralConfig": "mixtral", "Qwen2MoeConfig": "qwen2_moe",
               "Qwen3MoeConfig": "qwen3_moe", "OlmoeConfig": "olmoe"}
# Architectures a transformers project commonly builds that Strata has no family for, and why.
UNSUPPORTED = {
    "mistral": "sliding-window attention", "qwen2": "q/k/v bias without an output bias",
    "gemma": "GeGLU MLP and scaled embeddings", "gemma2": "soft-capped logits",
    "phi": "partial rotary embeddings and parallel blocks", "phi3": "fused projections and long-rope scaling",
    "gpt_neox": "parallel attention and MLP", "gptj": "parallel attention and MLP", "falcon": "parallel blocks",
    "opt": "ReLU MLP and learned offsets", "bloom": "ALiBi positions", "mpt": "ALiBi positions",
    "bert": "an encoder", "roberta": "an encoder", "t5": "an encoder-decoder", "bart": "an encoder-decoder",
}


def model_type_of_class(class_name):
    if class_name in CLASS_TYPES:
        return CLASS_TYPES[class_name]
    return class_name[:-len("Config")].lower() if class_name.endswith("Config") else class_name.lower()


def _given(values, key, default=None):
    return values[key] if values.get(key) is not None else default


def _rope(values, keys, assumed):
    """rope_scaling (transformers v4) or rope_parameters (v5, which also holds rope_theta) into keys."""
    scaling = values.get("rope_parameters", values.get("rope_scaling"))
    if not isinstance(scaling, dict):
        return None
    if "rope_theta" in scaling and values.get("rope_theta") is None:
        keys["rope_theta"] = float(scaling["rope_theta"])
        if "rope_theta" in assumed:
            assumed.remove("rope_theta")
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return None
    if kind not in ("linear", "llama3"):
        return f"rope scaling '{kind}' (Strata has linear and llama3)"
    keys["rope_scaling"] = kind
    keys["rope_factor"] = float(scaling.get("factor", 1.0))
    if kind == "llama3":
        for source, target in (("low_freq_factor", "rope_low_freq_factor"), ("high_freq_factor", "rope_high_freq_factor"),
                               ("original_max_position_embeddings", "rope_original_max_positions")):
            if source in scaling:
                keys[target] = scaling[source]
    return None


def _moe_refusal(model_type, values, keys):
    """What Strata's MoE families do not run (moe_hf_config.cpp refuses the same), or None."""
    if _given(values, "router_jitter_noise", 0.0) != 0.0:
        return f"router_jitter_noise {values['router_jitter_noise']} makes routing random; Strata routes deterministically"
    if _given(values, "clip_qkv") is not None:
        return f"clip_qkv {values['clip_qkv']}: Strata does not clip q, k and v"
    if model_type in ("qwen2_moe", "qwen3_moe"):
        if _given(values, "decoder_sparse_step", 1) != 1:
            return f"decoder_sparse_step {values['decoder_sparse_step']} makes some layers dense; Strata's {model_type} " \
                   "has every layer sparse (1)"
        if _given(values, "mlp_only_layers", []) != []:
            return f"mlp_only_layers {values['mlp_only_layers']} makes those layers dense; Strata's {model_type} has " \
                   "every layer sparse ([])"
        if _given(values, "use_sliding_window", False):
            return "use_sliding_window is true: sliding-window attention (Strata's attention is full causal attention)"
    elif _given(values, "sliding_window") is not None and values["sliding_window"] < keys["max_position_embeddings"]:
        return f"sliding_window {values['sliding_window']} is shorter than max_position_embeddings: sliding-window " \
               "attention (Strata's attention is full causal attention)"
    if model_type == "qwen2_moe" and not _given(values, "qkv_bias", True):
        return "qkv_bias is false; Strata's qwen2_moe has q, k and v biases"
    return None


def _moe_keys(model_type, values, keys, assumed):
    """The keys Strata's MoE reader sets beyond the names mapped one to one."""
    if model_type == "qwen2_moe":
        keys["attention_bias"] = True  # Qwen2MoeAttention's q/k/v biases (qkv_bias), never the output's
    if not _given(values, "output_router_logits", False):
        keys["router_aux_loss_coef"] = 0.0  # the loss is not added to the training loss
        if "output_router_logits" not in values:
            assumed.append("router_aux_loss_coef")
    elif values.get("router_aux_loss_coef") is not None:
        keys["router_aux_loss_coef"] = float(values["router_aux_loss_coef"])
    else:
        keys["router_aux_loss_coef"] = AUX_LOSS_DEFAULTS[model_type]
        assumed.append("router_aux_loss_coef")


def map_hf_config(model_type, values):
    """{'family', 'keys', 'assumed'} for a config of a Strata family, else {'unsupported': why}."""
    if model_type not in FAMILIES:
        why = UNSUPPORTED.get(model_type, "an architecture Strata has no family for")
        return {"unsupported": f"model type '{model_type}': {why} (Strata's families are {FAMILY_LIST})"}
    defaults, names = FAMILIES[model_type]
    keys, assumed = {"family": model_type}, []
    for source, target in names.items():
        if source in values and values[source] is not None:
            keys[target] = values[source]
        elif source in defaults:
            keys[target] = defaults[source]
            assumed.append(target)
    if model_type != "gpt2" and _given(values, "hidden_act", "silu") != "silu":
        return {"unsupported": f"model type '{model_type}': hidden_act '{values['hidden_act']}' is not SwiGLU's 'silu'"}
    problem = _rope(values, keys, assumed)
    if model_type in AUX_LOSS_DEFAULTS:
        problem = problem or _moe_refusal(model_type, values, keys)
        _moe_keys(model_type, values, keys, assumed)
    if problem:
        return {"unsupported": f"model type '{model_type}': {problem}"}
    keys["block_size"] = keys["max_position_embeddings"]
    return {"family": model_type, "keys": keys, "assumed": assumed,
            "reason": f"model type '{model_type}' is Strata's {model_type} family"}
