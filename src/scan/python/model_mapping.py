"""The model a project builds, as Strata [model] keys. Evidence in order of trust: a known
from_pretrained name (rules/models.toml) or a config.json the project holds, a transformers config
class built with literal keywords, then a GPT/LLaMA-style nn.Module recognised by its structure."""
import json
import os

from hf_config import FAMILY_LIST, map_hf_config, model_type_of_class
from model_structure import find_model_classes, shape_values

# The keys of transformers' configs that give a model's size (GPT-2's; LLaMA's and the MoE families').
SIZE_KEYS = {"n_layer", "n_head", "n_embd", "num_hidden_layers", "num_attention_heads", "hidden_size"}
REQUIRED_SIZES = ("n_layer", "n_head", "n_embd", "vocab_size", "block_size")
STRUCTURE_DEFAULTS = {"gpt2": {"layer_norm_eps": 1e-5}, "llama": {"layer_norm_eps": 1e-5, "rope_theta": 10000.0}}


def _known_name(name, models):
    lowered = name.lower()
    for key, keys in models.items():
        if key.lower() in (lowered, lowered.rsplit("/", 1)[-1]):
            return key, dict(keys)
    return None, None


def _config_json(path):
    try:
        with open(path, "rb") as handle:
            document = json.load(handle)
    except (OSError, ValueError, RecursionError):
        return None
    return document if isinstance(document, dict) and isinstance(document.get("model_type"), str) else None


def _result(source, evidence, mapped):
    result = {"found": True, "source": source, "evidence": evidence}
    if "unsupported" in mapped:
        return {**result, "supported": False, "reason": mapped["unsupported"]}
    return {**result, "supported": True, "family": mapped["family"], "keys": mapped["keys"],
            "assumed": mapped.get("assumed", []), "reason": mapped.get("reason", "")}


def _from_pretrained(use, root, models):
    evidence = f"{use['receiver']}.from_pretrained({use['name']!r}) at {use['file']}:{use['line']}"
    key, keys = _known_name(use["name"], models)
    if keys is not None:
        keys["block_size"] = keys["max_position_embeddings"]
        return _result("from_pretrained", evidence, {"family": keys["family"], "keys": keys,
                                                     "reason": f"'{key}' is in Strata's table of known models"})
    local = os.path.join(root, use["name"], "config.json")
    document = _config_json(local) if os.path.isfile(local) else None
    if document is not None:
        return _result("from_pretrained", evidence, map_hf_config(document["model_type"], document))
    return _result("from_pretrained", evidence, {"unsupported": f"'{use['name']}' is not a model Strata knows by name "
                   f"(rules/models.toml); if it is of a Strata family ({FAMILY_LIST}), model.init_from = its "
                   "downloaded directory reads its config.json"})


def _config_class(call):
    evidence = f"transformers.{call['cls']}(...) at {call['file']}:{call['line']}"
    return _result("config class", evidence, map_hf_config(model_type_of_class(call["cls"]), call["values"]))


def _structure(facts, key, family, why):
    info = facts.classes[key]
    evidence = f"class {info['name']} at {info['file']}:{info['line']}"
    if family is None:
        return _result("structure", evidence, {"unsupported": why})
    values, origin = shape_values(facts, info["file"])
    keys, assumed = {"family": family, **STRUCTURE_DEFAULTS[family]}, []
    for key in ("layer_norm_eps", "rope_theta"):
        if key in keys and key not in values:
            assumed.append(key)
    multiple_of = values.pop("multiple_of", None)
    keys.update({k: v for k, v in values.items() if family == "llama" or k not in ("n_kv_head", "intermediate_size", "rope_theta")})
    if family == "llama" and "intermediate_size" not in keys and "n_embd" in keys and multiple_of:
        hidden = int(2 * 4 * keys["n_embd"] / 3)  # LLaMA's reference sizing of the SwiGLU width
        keys["intermediate_size"] = multiple_of * ((hidden + multiple_of - 1) // multiple_of)
    needed = REQUIRED_SIZES + (("intermediate_size",) if family == "llama" else ())
    missing = [k for k in needed if k not in keys]
    unfound = f"; not found in the project, so Strata's defaults (set them): {', '.join(missing)}" if missing else ""
    mapped = _result("structure", evidence, {"family": family, "keys": keys, "assumed": assumed,
                                             "reason": f"{why}; sizes from {origin}{unfound}"})
    mapped["missing"] = missing
    return mapped


def _candidates(facts, config_files, root, models):
    """Every model the project shows, mapped, most trusted first."""
    for use in facts.pretrained:
        yield _from_pretrained(use, root, models)
    for relative in config_files:
        document = _config_json(os.path.join(root, relative))
        if document is not None:
            yield _result("config.json", relative, map_hf_config(document["model_type"], document))
    sized = [c for c in facts.config_calls if any(k in SIZE_KEYS for k in c["values"])]
    for call in sorted(sized, key=lambda c: -len(c["values"])):
        yield _config_class(call)
    for key, family, why in find_model_classes(facts.classes):
        yield _structure(facts, key, family, why)
    for call in facts.config_calls:  # a config class with no literal sizes: every size assumed
        if call not in sized:
            yield _config_class(call)


def map_model(facts, config_files, root, models):
    """The most trusted model found, with the evidence of the others; or {'found': False}."""
    candidates = list(_candidates(facts, config_files, root, models))
    if not candidates:
        return {"found": False, "reason": "no from_pretrained name, config.json, transformers config class or "
                                          "GPT/LLaMA-style nn.Module was found"}
    chosen = candidates[0]
    chosen["also_found"] = [f"{c['evidence']} ({c['family'] if c['supported'] else 'not a Strata family'})"
                            for c in candidates[1:]]
    return chosen
