"""A HuggingFace config (config.json, or a transformers config class's keywords) as Strata's
[model] keys, with transformers' own defaults for keys not given (listed as assumed)."""

GPT2_DEFAULTS = {"vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12,
                 "layer_norm_epsilon": 1e-5}
LLAMA_DEFAULTS = {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
                  "num_attention_heads": 32, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
                  "rope_theta": 10000.0, "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False}
GPT2_KEYS = {"n_layer": "n_layer", "n_head": "n_head", "n_embd": "n_embd", "vocab_size": "vocab_size",
             "n_positions": "max_position_embeddings", "layer_norm_epsilon": "layer_norm_eps"}
LLAMA_KEYS = {"num_hidden_layers": "n_layer", "num_attention_heads": "n_head", "num_key_value_heads": "n_kv_head",
              "hidden_size": "n_embd", "intermediate_size": "intermediate_size", "vocab_size": "vocab_size",
              "max_position_embeddings": "max_position_embeddings", "rms_norm_eps": "layer_norm_eps",
              "rope_theta": "rope_theta", "tie_word_embeddings": "tie_word_embeddings",
              "attention_bias": "attention_bias", "mlp_bias": "mlp_bias", "head_dim": "head_dim"}
FAMILIES = {"gpt2": ("gpt2", GPT2_DEFAULTS, GPT2_KEYS), "llama": ("llama", LLAMA_DEFAULTS, LLAMA_KEYS)}
CLASS_TYPES = {"GPT2Config": "gpt2", "LlamaConfig": "llama"}
# Architectures a transformers project commonly builds that Strata has no family for, and why.
UNSUPPORTED = {
    "mistral": "sliding-window attention", "mixtral": "mixture of experts", "qwen2": "q/k/v bias without an output bias",
    "qwen2_moe": "mixture of experts", "gemma": "GeGLU MLP and scaled embeddings", "gemma2": "soft-capped logits",
    "phi": "partial rotary embeddings and parallel blocks", "phi3": "fused projections and long-rope scaling",
    "gpt_neox": "parallel attention and MLP", "gptj": "parallel attention and MLP", "falcon": "parallel blocks",
    "opt": "ReLU MLP and learned offsets", "bloom": "ALiBi positions", "mpt": "ALiBi positions",
    "bert": "an encoder", "roberta": "an encoder", "t5": "an encoder-decoder", "bart": "an encoder-decoder",
}


def model_type_of_class(class_name):
    if class_name in CLASS_TYPES:
        return CLASS_TYPES[class_name]
    return class_name[:-len("Config")].lower() if class_name.endswith("Config") else class_name.lower()


def _rope_scaling(scaling, keys):
    kind = scaling.get("rope_type", scaling.get("type"))
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


def map_hf_config(model_type, values):
    """{'family', 'keys', 'assumed'} for a GPT-2 or LLaMA config, else {'unsupported': why}."""
    if model_type not in FAMILIES:
        why = UNSUPPORTED.get(model_type, "an architecture Strata has no family for")
        return {"unsupported": f"model type '{model_type}': {why} (Strata's families are gpt2 and llama)"}
    family, defaults, names = FAMILIES[model_type]
    keys, assumed = {"family": family}, []
    for source, target in names.items():
        if source in values and values[source] is not None:
            keys[target] = values[source]
        elif source in defaults:
            keys[target] = defaults[source]
            assumed.append(target)
    if isinstance(values.get("rope_scaling"), dict):
        problem = _rope_scaling(values["rope_scaling"], keys)
        if problem:
            return {"unsupported": problem}
    keys["block_size"] = keys["max_position_embeddings"]
    return {"family": family, "keys": keys, "assumed": assumed, "reason": f"model type '{model_type}' is Strata's {family} family"}
