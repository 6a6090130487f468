"""A GPT- or LLaMA-style nn.Module recognised by its structure: a class that constructs a token
embedding, a list of blocks and a head, whose blocks (followed through the project's own classes)
hold attention and an MLP and a norm. The family follows from the parts: LayerNorm, GELU and a
learned position table are GPT-2; RMSNorm, SiLU (SwiGLU) and rotary positions are LLaMA; either needs
a causal mask (tril/triu, is_causal, a "causal" name), else it is an encoder Strata has no family for."""

SYNONYMS = {
    "n_layer": ("n_layer", "n_layers", "num_layers", "num_hidden_layers", "depth"),
    "n_head": ("n_head", "n_heads", "num_heads", "num_attention_heads"),
    "n_kv_head": ("n_kv_head", "n_kv_heads", "num_kv_heads", "num_key_value_heads"),
    "n_embd": ("n_embd", "n_embed", "dim", "d_model", "hidden_size", "embed_dim", "emb_dim"),
    "vocab_size": ("vocab_size", "n_vocab"),
    "block_size": ("block_size", "max_seq_len", "seq_len", "context_length", "max_seq_length", "n_ctx",
                   "n_positions", "max_position_embeddings"),
    "intermediate_size": ("intermediate_size", "hidden_dim", "ffn_dim", "d_ff", "ffn_hidden_size"),
    "layer_norm_eps": ("norm_eps", "layer_norm_eps", "rms_norm_eps", "layer_norm_epsilon"),
    "rope_theta": ("rope_theta", "rope_base"),
    "multiple_of": ("multiple_of",),
}
NAME_OF = {synonym: key for key, synonyms in SYNONYMS.items() for synonym in synonyms}


def _tags(name, info):
    """What one class constructs and calls directly."""
    tags = {"embedding": 0}
    for construct in info["constructs"]:
        short = construct.rsplit(".", 1)[-1]
        if short == "Embedding":
            tags["embedding"] += 1
        elif short in ("ModuleList", "Sequential"):
            tags["blocks"] = True
        elif short == "Linear":
            tags["linear"] = True
        elif short == "MultiheadAttention":
            tags["attention"] = True
    uses = {u.lower() for u in info["uses"]}
    lowered = name.lower()
    if "layernorm" in lowered or "LayerNorm" in info["constructs_short"] or "layer_norm" in uses:
        tags["layernorm"] = True
    if "rmsnorm" in lowered or "RMSNorm" in info["constructs_short"] or "rsqrt" in uses:
        tags["rmsnorm"] = True
    if uses & {"softmax", "scaled_dot_product_attention", "flash_attn_func"}:
        tags["attention"] = True
    if uses & {"gelu", "gelu_new"} or "GELU" in info["constructs_short"]:
        tags["gelu"] = True
    if "silu" in uses or "SiLU" in info["constructs_short"]:
        tags["silu"] = True
    if any("rotary" in u or "rope" in u or u in ("rotate_half", "freqs_cis", "polar") for u in uses):
        tags["rotary"] = True
    if "causal" in lowered or any("causal" in u or u in ("tril", "triu") for u in uses):
        tags["causal"] = True  # a causal mask: a decoder, not an encoder
    return tags


def _resolve(short, file, index):
    """The project class a constructor name means: the one defined in the same file, else the only one."""
    keys = index.get(short, ())
    same_file = [k for k in keys if k[0] == file]
    return same_file[0] if same_file else (keys[0] if len(keys) == 1 else None)


def _union(key, classes, index, cache, seen=()):
    """The tags of a class and of every project class it constructs."""
    if key in cache:
        return cache[key]
    info = classes[key]
    tags = dict(info["tags"])
    for construct in info["constructs"]:
        inner_key = _resolve(construct.rsplit(".", 1)[-1], key[0], index)
        if inner_key is not None and inner_key not in seen and inner_key != key:
            inner = _union(inner_key, classes, index, cache, seen + (key,))
            tags["embedding"] += inner["embedding"]
            tags.update({k: v for k, v in inner.items() if k != "embedding" and v})
    cache[key] = tags
    return tags


def _family(tags):
    """(family or None, why) of a transformer's parts."""
    if not tags.get("causal"):
        return None, "a transformer without a causal mask (an encoder?): Strata's families are decoder-only"
    if tags.get("rmsnorm") and tags.get("silu") and tags.get("rotary") and tags["embedding"] == 1:
        return "llama", "RMSNorm, SiLU-gated MLP, rotary positions and a causal mask: the LLaMA family"
    if tags.get("layernorm") and tags.get("gelu") and tags["embedding"] == 2 and not tags.get("rotary"):
        return "gpt2", "LayerNorm, GELU MLP, a learned position table and a causal mask: the GPT-2 family"
    parts = ", ".join(sorted(k for k, v in tags.items() if v and k != "embedding"))
    return None, f"a decoder-only transformer ({parts}) that is neither GPT-2's nor LLaMA's layout"


def find_model_classes(classes):
    """((file, name), family or None, why) of every class that looks like a whole transformer, the
    outermost (constructed by no other class) first, then in source order."""
    index = {}
    for key, info in classes.items():
        info["constructs_short"] = {c.rsplit(".", 1)[-1] for c in info["constructs"]}
        info["tags"] = _tags(info["name"], info)
        index.setdefault(info["name"], []).append(key)
    cache, candidates = {}, []
    for key, info in classes.items():
        own = info["tags"]
        if own["embedding"] and own.get("blocks") and own.get("linear"):
            whole = _union(key, classes, index, cache)
            if whole.get("attention") and (whole.get("layernorm") or whole.get("rmsnorm")):
                candidates.append((key, whole))
    constructed = {c.rsplit(".", 1)[-1] for info in classes.values() for c in info["constructs"]}
    candidates.sort(key=lambda c: (c[0][1] in constructed, c[0][0], classes[c[0]]["line"]))
    return [(key, *_family(tags)) for key, tags in candidates]


def shape_values(facts, model_file):
    """Strata keys from the project's config-like class (one in the model's file first; its defaults,
    then the literal instantiation setting most of them), else from module-level constants; with
    where each came from."""
    best, best_rank = None, None
    for (_, name), info in facts.classes.items():
        known = {NAME_OF[f]: v for f, v in info["fields"].items() if f in NAME_OF}
        rank = (info["file"] == model_file, len(known))
        if len(known) >= 3 and (best_rank is None or rank > best_rank):
            best, best_rank = (name, known, info), rank
    if best is not None:
        name, values, info = best
        calls = [c for c in facts.instantiations if c["callee"] == name]
        mapped = [{NAME_OF[k]: v for k, v in c["values"].items() if k in NAME_OF} for c in calls]
        if mapped:
            chosen = max(range(len(mapped)), key=lambda i: len(mapped[i]))
            values = {**values, **mapped[chosen]}
            return values, f"{name}(...) at {calls[chosen]['file']}:{calls[chosen]['line']} over its defaults"
        return values, f"the defaults of {name} ({info['file']}:{info['line']})"
    constants = {NAME_OF[c["name"]]: c for c in sorted(facts.constants, key=lambda c: c["file"] != model_file)
                 if c["name"] in NAME_OF}
    if len(constants) >= 3:
        first = min(constants.values(), key=lambda c: (c["file"], c["line"]))
        return {k: c["value"] for k, c in constants.items()}, f"module constants ({first['file']})"
    return {}, "no sizes found"
