"""The model a project builds, as Strata [model] keys. Evidence in order of trust: a known
from_pretrained name (rules/models.toml) or a config.json the project holds, a transformers config
class built with literal keywords, then a GPT/LLaMA-style nn.Module recognised by its structure."""
import json
import os

from hf_config import map_hf_config, model_type_of_class
from model_structure import find_model_class, shape_values

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


def _from_pretrained(facts, root, models):
    for use in facts.pretrained:
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
        return _result("from_pretrained", evidence, {"unsupported": f"'{use['name']}' is not a model Strata knows by "
                       "name (rules/models.toml); if it is GPT-2 or LLaMA, model.init_from = its downloaded directory "
                       "reads its config.json"})
    return None


def _structure(facts):
    found = find_model_class(facts.classes)
    if found is None:
        return None
    name, family, why = found
    info = facts.classes[name]
    evidence = f"class {name} at {info['file']}:{info['line']}"
    if family is None:
        return _result("structure", evidence, {"unsupported": why})
    values, origin = shape_values(facts)
    keys, assumed = {"family": family, **STRUCTURE_DEFAULTS[family]}, []
    for key in ("layer_norm_eps", "rope_theta"):
        if key in keys and key not in values:
            assumed.append(key)
    multiple_of = values.pop("multiple_of", None)
    keys.update({k: v for k, v in values.items() if family == "llama" or k not in ("n_kv_head", "intermediate_size", "rope_theta")})
    if family == "llama" and "intermediate_size" not in keys and "n_embd" in keys and multiple_of:
        hidden = int(2 * 4 * keys["n_embd"] / 3)  # LLaMA's reference sizing of the SwiGLU width
        keys["intermediate_size"] = multiple_of * ((hidden + multiple_of - 1) // multiple_of)
    return _result("structure", evidence, {"family": family, "keys": keys, "assumed": assumed,
                                           "reason": f"{why}; sizes from {origin}"})


def map_model(facts, config_files, root, models):
    """The model found, or {'found': False}."""
    mapped = _from_pretrained(facts, root, models)
    if mapped is None:
        for relative in config_files:
            document = _config_json(os.path.join(root, relative))
            if document is not None:
                mapped = _result("config.json", relative, map_hf_config(document["model_type"], document))
                break
    if mapped is None and facts.config_calls:
        call = facts.config_calls[0]
        evidence = f"transformers.{call['cls']}(...) at {call['file']}:{call['line']}"
        mapped = _result("config class", evidence, map_hf_config(model_type_of_class(call["cls"]), call["values"]))
    if mapped is None:
        mapped = _structure(facts)
    return mapped or {"found": False, "reason": "no from_pretrained name, config.json, transformers config class or "
                                                "GPT/LLaMA-style nn.Module was found"}
