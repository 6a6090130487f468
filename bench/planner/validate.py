#!/usr/bin/python3
"""Planner validation: `strata plan`'s predicted step time against published training runs.

For every row of bench/planner/published/*.csv (README.md there describes the columns) this
writes the model as a [model] TOML, maps the device to a cluster preset, asks
`strata plan ... --json --top 1` for exactly the published layout and compares plans[0].step_s
with measured_iteration_s. Rows the planner cannot express are skipped (and listed, with the
reason); layouts the planner refuses (memory, invalid) are listed as rejected. Neither counts in
the error figures.

Figures: per row the error pred/meas - 1; per source and overall the mean absolute error (MAE,
mean |pred/meas - 1|), the mean signed error and the Spearman rank correlation of predicted vs
measured within groups of runs of the same model on the same device (source + model + device,
groups of >= 3 rows; average ranks for ties), per group and the mean over groups. The same figures
leave-one-source-out: each row priced again with every mechanism and preset value its source
motivated switched off or at its prior value (bench/planner/mechanisms.csv, provenance.py), and the
cluster presets whose rows come from one source only flagged.

Usage: validate.py [--csv FILE...] [--rows ID,ID,...] [--max-mae PCT | --max-mae-file FILE]
                   [--strict] [--json OUT] [--strata PATH] [--keep DIR]
Exit status: 0; 1 when the overall MAE exceeds --max-mae (or no row could be evaluated then), or
with --strict a selected row was rejected / failed; 2 on bad arguments or input.
Python 3 standard library only.
"""
import argparse
import csv
import glob
import json
import math
import os
import subprocess
import sys
import tempfile

from provenance import ProvenanceError, Variant, read_mechanisms

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PUBLISHED = os.path.join(REPO, "bench", "planner", "published")
MECHANISMS = os.path.join(REPO, "bench", "planner", "mechanisms.csv")
GPUS_PER_NODE = 8

# device column -> cluster preset (all 8 devices per node).
DEVICE_PRESETS = [
    (lambda d: d == "a100-80gb", "configs/clusters/dgx-a100-80gb.toml"),
    (lambda d: d == "a100-40gb", "configs/clusters/dgx-a100-40gb.toml"),
    (lambda d: d == "h100-sxm", "configs/clusters/dgx-h100.toml"),
    (lambda d: d.startswith("other: H100 96GB") or d.startswith("other: H100 94GB"),
     "configs/clusters/grand-teton-h100.toml"),
]

# Fields the planner needs; an empty cell or 'unknown' means the source does not give it.
REQUIRED = ["micro_batch", "recompute", "zero", "attention", "virtual_stages", "sp", "dtype"]
DTYPES = {"bf16": "bf16", "fp16": "f16", "fp8": "bf16"}  # fp8: bf16 training with float8 linears (FP8_RUNTIMES)

# dtype fp8, by framework: the float8 scaling recipe (`strata plan --fp8`, src/planner/fp8_linears.h) and whether the
# float8 linears' weights are all-gathered in fp8 (`--fp8-gather`), from each framework's code and docs:
# - NeMo on Megatron-Core (megatron-core-nemo): Transformer Engine's DelayedScaling (fp8_hybrid); fp8_params true (the
#   GPT-3 recipe) keeps the weights in fp8, which the distributed optimizer all-gathers in fp8 (Megatron-LM's
#   --fp8-param-gather).
# - MaxText (maxtext): quantization=fp8 runs Flax's fp8 dot (amax history: delayed scaling), the weights cast inside
#   the dot after XLA's FSDP all-gather (bf16).
# - torchtitan (torchtitan-fsdp2, 9dec370): torchao Float8Linear with dynamic tensorwise scaling (the only scaling its
#   docs/float8.md supports then), the output layer excluded; the float8 all-gather is a flag off by default that the
#   same docs' launch command turns on (--float8.enable_fsdp_float8_all_gather
#   --float8.precompute_float8_dynamic_scale_for_fsdp); the benchmark does not list its flags: assumed as documented.
# - OLMo-core (olmo-core-fsdp2, 41400c46f): torchao with Float8Config's defaults: dynamic scaling,
#   enable_fsdp_float8_all_gather = True.
FP8_RUNTIMES = {"megatron-core-nemo": ("delayed", "on"), "maxtext": ("delayed", "off"),
                "torchtitan-fsdp2": ("tensorwise", "on"), "olmo-core-fsdp2": ("tensorwise", "on")}

# Breakdown terms shown in the table (plans[0].time_s keys), in this order; the rest are summed as 'other'.
TERMS = [("compute", "compute"), ("recompute", "recomp"), ("tp_comm", "tp"), ("pp_comm", "pp"),
         ("bubble", "bubble"), ("dp_comm", "dp"), ("zero_comm", "zero"), ("param_gather", "gather")]


def fail_usage(message):
    print(f"validate.py: {message}", file=sys.stderr)
    sys.exit(2)


def preset_for(device):
    for match, preset in DEVICE_PRESETS:
        if match(device):
            return preset
    return None


def unknown(value):
    return value is None or value.strip() == "" or value.strip().lower() == "unknown"


# Context parallelism by framework (row prefix): the K/V exchange the planner prices it with (strata plan --cp N
# --cp-exchange, src/planner/context_parallel_exchange.h), from each framework's code:
# - Megatron-Core (NeMo's rows): Transformer Engine's point-to-point ring (cp_comm_type p2p), the default "ring".
# - torchtitan: PyTorch's context_parallel (torch.distributed.tensor.experimental), its K/V rotation set by
#   --experimental.context_parallel_rotate_method, default "allgather" at 9dec370 (torchtitan/config_manager.py);
#   the benchmark (llama3_h100_202412_torchtitan.md, Table 2 and 6) does not set it.
# Meta's internal context parallelism (an all-gather of K/V, Llama 3 paper) has no rows here.
CP_EXCHANGES = {"megatron": "ring", "torchtitan": "allgather"}


def cp_exchange(row):
    """The row's framework's context-parallel exchange, or None when the planner does not price it."""
    framework = row.get("framework", "").strip()
    return next((exchange for prefix, exchange in CP_EXCHANGES.items() if framework.startswith(prefix)), None)


def context_parallel(row):
    cp = row.get("cp", "").strip()
    return int(cp) if cp else 1


def skip_reasons(row):
    """Why the planner cannot express this row ([] when it can)."""
    reasons = []
    cp = context_parallel(row)
    if cp > 1 and cp_exchange(row) is None:
        reasons.append(f"context parallelism cp={cp} as framework '{row.get('framework', '')}' runs it "
                       "(the planner prices Transformer Engine's ring and torch's context_parallel)")
    if row.get("dtype", "").strip() == "fp8" and row.get("framework", "").strip() not in FP8_RUNTIMES:
        reasons.append(f"dtype fp8 from framework '{row.get('framework', '')}', whose float8 recipe is not mapped")
    missing = [f for f in REQUIRED if unknown(row.get(f))]
    if missing:
        reasons.append("not given: " + ", ".join(missing))
    dtype = row.get("dtype", "").strip()
    if not unknown(dtype) and dtype not in DTYPES:
        reasons.append(f"dtype {dtype} has no planner dtype")
    if preset_for(row.get("device", "").strip()) is None:
        reasons.append(f"no cluster preset for device '{row.get('device', '')}'")
    gpus = int(row["gpus"])
    if gpus % GPUS_PER_NODE != 0:
        reasons.append(f"{gpus} GPUs are not whole {GPUS_PER_NODE}-GPU nodes")
    if row.get("gpus_per_node", "8").strip() not in ("", str(GPUS_PER_NODE)):
        reasons.append(f"gpus_per_node {row['gpus_per_node']} (presets have {GPUS_PER_NODE})")
    if unknown(row.get("measured_iteration_s")):
        reasons.append("no measured iteration time")
    family = row.get("family", "").strip()
    if family not in ("gpt", "llama"):
        reasons.append(f"family '{family}' has no planner family")
    elif family == "gpt" and row["n_kv_head"].strip() not in ("", row["n_head"].strip()):
        reasons.append("gpt row with grouped-query attention (gpt2 family has none)")
    return reasons


def model_toml(row):
    """The [model] table for a row, and notes on approximations."""
    notes = []
    hidden, ffn = int(row["hidden"]), int(row["ffn_hidden"])
    lines = ["[model]"]
    if row["family"] == "gpt":
        # gpt2 family: GeLU MLP of intermediate_size (default 4*n_embd), LayerNorm, learned positions, tied head.
        lines.append('family = "gpt2"')
        if ffn != 4 * hidden:
            notes.append(f"ffn_hidden {ffn} != 4*hidden {4 * hidden}: intermediate_size set")
    else:
        lines.append('family = "llama"')
    lines += [f"n_layer = {int(row['n_layer'])}", f"n_head = {int(row['n_head'])}", f"n_embd = {hidden}",
              f"vocab_size = {int(row['vocab'])}", f"block_size = {int(row['seq'])}",
              f"intermediate_size = {ffn}"]
    if row["family"] == "llama":
        lines.append(f"n_kv_head = {int(row['n_kv_head'])}")
        # Llama 3 (the only llama family here) has an untied output head; rope settings stay default.
        lines.append("tie_word_embeddings = false")
    return "\n".join(lines) + "\n", notes


def plan_command(strata, row, model_path, variant):
    """The row's `strata plan` command; `variant` (provenance.Variant) switches mechanisms off."""
    preset = preset_for(row["device"].strip())
    preset = variant.presets.get(preset, os.path.join(REPO, preset))
    pp = int(row["pp"])
    cmd = [strata, "plan", model_path, preset,
           "--nodes", str(int(row["gpus"]) // GPUS_PER_NODE),
           "--dp", row["dp"].strip(), "--tp", row["tp"].strip(), "--pp", str(pp),
           *(["--cp", str(context_parallel(row))] if context_parallel(row) > 1 else []),  # skipped unless priced
           "--micro-batch", row["micro_batch"].strip(), "--global-batch", row["global_batch"].strip(),
           "--seq", row["seq"].strip(), "--dtype", DTYPES[row["dtype"].strip()],
           "--zero", row["zero"].strip(), "--recompute", row["recompute"].strip(),
           "--sp", "on" if row["sp"].strip() == "1" else "off"]
    if context_parallel(row) > 1 and cp_exchange(row) != "ring":
        cmd += ["--cp-exchange", cp_exchange(row)]
    # The ring steps' results merged as the runtime merges them (src/planner/ring_merge_work.h): Transformer Engine's
    # corrections and in-place sums under Megatron-Core's ring, PyTorch's fp32 merger and accumulators under torch's,
    # fused by torch.compile where the row compiled (torchtitan compiles each block with fullgraph=True).
    if context_parallel(row) > 1:
        compiled = (row.get("compile") or "").strip() == "1"
        cmd += ["--cp-merge", "te" if cp_exchange(row) == "ring" else "torch-compiled" if compiled else "torch"]
    if pp > 1:
        # Megatron builds num_layers // pp layers on every stage (each rank's share again // virtual stages) unless
        # told first/last_pipeline_num_layers, which none of these runs sets (get_num_layers_to_build in
        # megatron/core/transformer/transformer_block.py at Megatron-Core core_v0.9.0; Megatron-LM of 2022 the same).
        if row.get("framework", "").strip().startswith("megatron"):
            cmd += ["--stage-layers", "even"]
        v = int(row["virtual_stages"])
        if v > 1:
            cmd += ["--schedule", "interleaved", "--virtual-stages", str(v)]
        else:
            cmd += ["--schedule", "1f1b"]
    cmd += ["--attention", row["attention"].strip()]
    # The PyTorch and Megatron frameworks clip in a pass of its own over the gradients: Megatron-LM's
    # clip_grad_norm_fp32 (multi_tensor_scale), PyTorch's clip_grad_norm_ (torch._foreach_mul_), which torchtitan and
    # Composer call. llm.c passes the clipping factor to its AdamW kernel (gpt2_update's grad_scale, train_gpt2.cu at
    # a0d5dbb..c6efd90), after a kernel of its own for the norm, as Strata's trainer does.
    cmd += ["--clip", "fused" if row.get("framework", "").strip() == "llm-c" else "separate"]
    # Megatron adds each micro-batch's weight gradient inside its GEMM (gradient-accumulation fusion)
    # and drops out attention probabilities and residual branches (its defaults, 0.1 each), unless the run's
    # config sets its dropouts to 0 (the `dropout` column 0: NeMo's Llama 3.1 configs).
    if row.get("framework", "").strip().startswith("megatron"):
        dropout = "off" if (row.get("dropout") or "").strip() == "0" else "on"
        cmd += ["--accumulate", "fused", "--dropout", dropout]
    # ... but the embedding is a lookup, in no GEMM: NeMo's distributed Adam (megatron_amp_O2, distributed_fused_adam,
    # grad_sync_dtype bf16, every dgxc NeMo config) keeps the embeddings' gradients in fp32 buckets and adds each
    # micro-batch's dense embedding gradient into them (megatron_gpt_model.py configure_optimizers and fwd_bwd_step's
    # no_sync(greedy_grad_copy=True), core/optim/distributed_adam.py at NVIDIA/NeMo r2.0.0rc1; apex's
    # DistributedFusedAdam._grad_copy at 810ffae; src/planner/embedding_grad_work.h).
    if row.get("framework", "").strip() == "megatron-core-nemo":
        cmd += ["--embedding-grad-add", "on"]
    # Megatron (its f/g operators before fused QKV and fc1 GEMMs) and torchtitan (PrepareModuleInput on the attention
    # and feed-forward blocks) enter the tensor-parallel region once for the linears that read one value.
    if row.get("framework", "").strip().startswith(("megatron", "torchtitan")):
        cmd += ["--tp-input", "shared"]
    # Sequence parallelism's collectives run chunk by chunk beside the GEMMs next to them where the run's config
    # says so (the `tp_overlap` column: NeMo's Transformer Engine Userbuffers with the SMs its ub config gives each
    # overlap, `userbuffers:NAME=N;...`, or torchtitan's async TP; src/planner/tp_overlap.h).
    overlap, _, comm_sms = (row.get("tp_overlap") or "").strip().partition(":")
    if overlap:
        cmd += ["--tp-overlap", overlap]
        if comm_sms:
            cmd += ["--ub-comm-sms", comm_sms.replace(";", ",")]
    # torchtitan's selective recomputation is its per-op policy (selective_ac_option = "op", the default), and its
    # loss casts the logits to fp32 and runs outside torch.compile (src/planner/loss_work.h).
    if row.get("framework", "").strip().startswith("torchtitan"):
        cmd += ["--selective", "alternate-gemms", "--loss", "eager-f32"]
    # A loss that differs between one framework's scripts is the row's own (the `loss` column: OLMo-core's eager
    # cross-entropy with z-loss, or its fused_loss Triton kernel; NeMo's Llama configs with cross_entropy_loss_fusion;
    # src/planner/loss_work.h). Otherwise Megatron's is its vocabulary-parallel cross-entropy on fp32 logits op by
    # op (fp16_lm_cross_entropy and cross_entropy_loss_fusion false, the defaults of Megatron-LM and Megatron-Core).
    if (row.get("loss") or "").strip():
        cmd += ["--loss", row["loss"].strip()]
    elif row.get("framework", "").strip().startswith("megatron"):
        cmd += ["--loss", "megatron-f32"]
    # A model that normalises all of q and k after their projections (the `qk_norm` column: OLMo 2;
    # src/planner/qk_norm_work.h).
    if (row.get("qk_norm") or "").strip() == "1":
        cmd += ["--qk-norm", "on"]
    # OLMo-core's Attention with torch.compile (use_flash=False) expands k and v to every query head with
    # repeat_interleave before F.scaled_dot_product_attention (src/olmo_core/nn/attention.py at 41400c46f);
    # torchtitan's Llama with repeat_kv (unsqueeze, expand, reshape: torchtitan/models/llama/model.py at 9dec370,
    # 1ea476e9f and 3faaa1a0, models/llama3/model.py at 820504e), compiled or eager (--eager on: copies of their own);
    # src/planner/kv_repeat_work.h; nothing for a model without grouped-query attention.
    if row.get("framework", "").strip() == "torchtitan-fsdp2":
        cmd += ["--kv-repeat", "on"]
    if row.get("framework", "").strip() == "olmo-core-fsdp2" and (row.get("compile") or "").strip() == "1":
        cmd += ["--kv-repeat", "on"]
        # ... and compiles each block only: the model's final RMSNorm runs op by op in fp32 (nn/layer_norm.py;
        # src/planner/final_norm_work.h).
        cmd += ["--final-norm", "olmo-eager"]
    # llm-foundry's MPT benchmarks ran attn_impl = triton (the benchmark yamls and submit_benchmarks.py's default):
    # Tri Dao's FlashAttention in Triton, priced on the presets' flash-triton engine (FlashAttention-2's, slower by
    # the FlashAttention-2 paper's ratios).
    if row.get("framework", "").strip() == "composer-fsdp" and row["attention"].strip() == "fused":
        cmd += ["--attention-library", "flash-triton"]
    # The flash-attention repository's GPT training of late 2022 ran FlashAttention 1.x (its table predates the 2.0
    # rewrite), priced on the A100 presets' flash-attn-1 engine (FlashAttention-2's at half its rate).
    if row.get("framework", "").strip() == "flash-attn-lightning" and row["attention"].strip() == "fused":
        cmd += ["--attention-library", "flash-attn-1"]
    # A run whose launch picks its fused attention's backend says so (the `attention_library` column): NeMo's GPT-3
    # 175B rows export NVTE_FUSED_ATTN=0 (nemo_megatron/launch.sh at dgxc-benchmarking 35a9aec), so Transformer
    # Engine's DotProductAttention runs the flash-attn package's FlashAttention-2, priced on the presets' flash
    # engine (FlashAttention-2 measured through PyTorch's SDPA) rather than the device's own (cuDNN's kernels).
    if (row.get("attention_library") or "").strip() and row["attention"].strip() == "fused":
        cmd += ["--attention-library", row["attention_library"].strip()]
    # ZeRO-3 as PyTorch's FSDP runs it, with its copies around the collectives (src/planner/fsdp_copies.h): Composer
    # and Lightning's FSDPStrategy (lit-gpt, TinyLlama) wrap FullyShardedDataParallel (FSDP1), torchtitan calls
    # fully_shard (FSDP2).
    if row.get("framework", "").strip() in ("composer-fsdp", "lit-gpt-fsdp"):
        cmd += ["--fsdp", "1"]
    if row.get("framework", "").strip() == "composer-fsdp":
        # Composer's PURE mixed precision (the source's "MP Mode" column) reduces the gradients in the compute
        # dtype (composer/trainer/mosaic_fsdp_utils.py, get_mixed_precision); DEFAULT in fp32.
        if (row.get("mixed_precision") or "").strip() == "pure":
            cmd += ["--fsdp-reduce", row["dtype"].strip()]
    elif row.get("framework", "").strip() in ("torchtitan-fsdp2", "olmo-core-fsdp2"):
        cmd += ["--fsdp", "2"]  # both shard with fully_shard (FSDP2)
    # Without torch.compile (the source says so), PyTorch runs the Llama's RMSNorm, rotary embedding and SwiGLU
    # op by op (src/planner/eager_work.h); compiled, or not stated, they are priced as one fused kernel each
    # (torchtitan's complex rotary embedding aside, below).
    if (row.get("compile") or "").strip() == "0":
        cmd += ["--eager", "on"]
    # torchtitan's compiled Llama still runs its rotary embedding's complex arithmetic (view_as_complex of x.float(),
    # times freqs_cis, view_as_real, type_as: torchtitan/models/llama/model.py 108-113 at 9dec370, llama3/model.py
    # 155-160 at 820504e) as eager kernels: Inductor falls back for complex operators (lowering.py's
    # fallback_node_due_to_unsupported_type; pytorch/torchtitan#15); src/planner/complex_rope_work.h.
    if row.get("framework", "").strip() == "torchtitan-fsdp2" and (row.get("compile") or "").strip() == "1":
        cmd += ["--rope", "complex-eager"]
    if row["dtype"].strip() == "fp8":
        recipe, gather = FP8_RUNTIMES[row["framework"].strip()]
        cmd += ["--fp8", recipe, "--fp8-gather", gather]
    cmd += ["--json", "--top", "1"]
    return variant.apply(cmd)


def rejection_reason(result):
    parts = []
    for r in result.get("rejected", []):
        text = f"{r.get('reason', '?')} (e.g. {r.get('example', '?')})"
        details = r.get("details") or []
        if details:
            text += ": " + details[0]
        parts.append(text)
    return "; ".join(parts) or "no plan and no reason given"


def evaluate(strata, row, work, variant):
    """Runs the planner for one expressible row (mechanisms off as `variant` says); returns a result dict."""
    out = {"id": row["id"], "source": row["source"], "model": row["model"], "device": row["device"],
           "measured_s": float(row["measured_iteration_s"])}
    text, notes = model_toml(row)
    out["notes"] = notes
    model_path = os.path.join(work, row["id"] + ".toml")
    with open(model_path, "w") as f:
        f.write(text)
    cmd = plan_command(strata, row, model_path, variant)
    out["command"] = " ".join(cmd)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        message = (proc.stderr.strip() or proc.stdout.strip() or f"exit status {proc.returncode}").splitlines()
        out["status"] = "rejected"
        out["reason"] = f"strata plan failed: {message[-1] if message else ''}"
        return out
    try:
        result = json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        out["status"] = "error"
        out["reason"] = f"strata plan printed no JSON ({e})"
        return out
    plans = result.get("plans") or []
    if not plans:
        out["status"] = "rejected"
        out["reason"] = rejection_reason(result)
        return out
    plan = plans[0]
    out["status"] = "ok"
    out["predicted_s"] = float(plan["step_s"])
    out["error"] = out["predicted_s"] / out["measured_s"] - 1
    out["time_s"] = plan.get("time_s", {})
    out["plan"] = plan.get("plan", {}).get("description", "")
    out["mfu"] = plan.get("mfu")
    peak = plan.get("memory_bytes", {}).get("peak")
    cap = plan.get("memory_bytes", {}).get("capacity")
    if peak is not None and cap:
        out["memory_gib"] = [peak / 2**30, cap / 2**30]
    return out


def ranks(values):
    """1-based ranks, ties get the average of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    r = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r


def spearman(xs, ys):
    """Pearson correlation of the (tie-averaged) ranks; None when either side is constant."""
    rx, ry = ranks(xs), ranks(ys)
    n = len(xs)
    mx, my = sum(rx) / n, sum(ry) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def mae(results):
    errors = [abs(r["error"]) for r in results]
    return 100 * sum(errors) / len(errors) if errors else None


def mean_signed(results):
    errors = [r["error"] for r in results]
    return 100 * sum(errors) / len(errors) if errors else None


def group_spearman(results):
    groups = {}
    for r in results:
        groups.setdefault((r["source"], r["model"], r["device"]), []).append(r)
    out = []
    for (source, model, device), members in sorted(groups.items()):
        if len(members) < 3:
            continue
        rho = spearman([m["predicted_s"] for m in members], [m["measured_s"] for m in members])
        out.append({"source": source, "model": model, "device": device, "n": len(members), "spearman": rho,
                    "ids": [m["id"] for m in members]})
    return out


def summary(results, rows_total, skipped, rejected):
    groups = group_spearman(results)
    rhos = [g["spearman"] for g in groups if g["spearman"] is not None]
    return {"rows": rows_total, "evaluated": len(results), "skipped": skipped, "rejected": rejected,
            "mae_pct": mae(results), "signed_pct": mean_signed(results), "groups": groups,
            "mean_spearman": sum(rhos) / len(rhos) if rhos else None}


def leave_one_source_out(strata, rows, records, mechanisms, work):
    """Each evaluated row priced again with every mechanism its source motivated off (provenance.Variant.without):
    the row's record gains 'loso' (predicted_s, error or the reason it failed). Returns {source: Variant}."""
    by_id = {row["id"]: row for row in rows}
    variants = {}
    for record in (r for r in records if r["status"] == "ok"):
        source = record["source"]
        if source not in variants:
            variants[source] = Variant.without(source, mechanisms, REPO, work)
        if not variants[source].mechanisms:
            record["loso"] = {"status": "ok", "predicted_s": record["predicted_s"], "error": record["error"]}
            continue
        again = evaluate(strata, by_id[record["id"]], work, variants[source])
        record["loso"] = {k: again[k] for k in ("status", "predicted_s", "error", "reason", "command") if k in again}
    return variants


def ablate(strata, rows, ok, mechanisms, work):
    """Each flag or preset mechanism off alone, on the evaluated rows of the sources that motivated it: how much of
    their fit it makes. Returns [{mechanism, rows, changed, mae_pct/signed_pct on and off}]."""
    by_id = {row["id"]: row for row in rows}
    out = []
    for m in (m for m in mechanisms if m["kind"] in ("flag", "preset")):
        mine = [r for r in ok if r["source"] in m["sources"]]
        variant = Variant.off([m], f"ablate-{m['id']}", REPO, work)
        again = [evaluate(strata, by_id[r["id"]], work, variant) for r in mine]
        both = [(r, a) for r, a in zip(mine, again) if a["status"] == "ok"]
        changed = sum(abs(a["predicted_s"] - r["predicted_s"]) > 1e-9 * r["predicted_s"] for r, a in both)
        out.append({"mechanism": m["id"], "rows": len(mine), "priced": len(both), "changed": changed,
                    "on": {"mae_pct": mae([r for r, _ in both]), "signed_pct": mean_signed([r for r, _ in both])},
                    "off": {"mae_pct": mae([a for _, a in both]), "signed_pct": mean_signed([a for _, a in both])}})
    return out


def print_ablation(ablation):
    print("\neach mechanism off alone, on the rows of the sources that motivated it (in-sample MAE / signed, on -> "
          "off):")
    for a in ablation:
        on, off = a["on"], a["off"]
        print(f"  {a['mechanism']:<30} rows {a['priced']:>2}/{a['rows']:<2} changed {a['changed']:>2}  MAE "
              f"{fmt(on['mae_pct'], '5.1f')} -> {fmt(off['mae_pct'], '5.1f')}  signed {fmt(on['signed_pct'], '+6.1f')} "
              f"-> {fmt(off['signed_pct'], '+6.1f')}")


def loso_results(ok):
    """The rows whose leave-one-source-out pricing succeeded, as results of their own (for summary)."""
    return [dict(r, predicted_s=r["loso"]["predicted_s"], error=r["loso"]["error"]) for r in ok
            if r.get("loso", {}).get("status") == "ok"]


def preset_sources(ok):
    """Cluster preset -> the sources of the evaluated rows priced on it."""
    uses = {}
    for r in ok:
        uses.setdefault(preset_for(r["device"].strip()), set()).add(r["source"])
    return uses


def fmt(value, spec, none="-"):
    return none if value is None else format(value, spec)


def read_max_mae_file(path):
    try:
        with open(path) as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if line:
                    return float(line)
    except (OSError, ValueError) as e:
        fail_usage(f"--max-mae-file {path}: {e}")
    fail_usage(f"--max-mae-file {path}: no number in it")


def print_rows(records):
    """The table of evaluated rows (with their leave-one-source-out error), then the rejected and skipped ones."""
    ok = [r for r in records if r["status"] == "ok"]
    head = f"{'id':<56} {'meas s':>8} {'pred s':>8} {'err %':>7} {'LOSO %':>7}  " + \
        " ".join(f"{t:>7}" for _, t in TERMS) + f" {'other':>7}"
    print("Predicted vs measured iteration time (strata plan, the published layout fixed); terms in seconds")
    print(head)
    print("-" * len(head))
    for r in ok:
        ts = r["time_s"]
        shown = [ts.get(k) for k, _ in TERMS]
        other = sum(v for k, v in ts.items() if k not in dict(TERMS))
        loso = r.get("loso", {}).get("error")
        print(f"{r['id']:<56} {r['measured_s']:>8.3f} {r['predicted_s']:>8.3f} {100 * r['error']:>+7.1f} "
              f"{fmt(None if loso is None else 100 * loso, '>+7.1f', f'{chr(45):>7}')}  " +
              " ".join(fmt(v, ">7.3f", f"{'-':>7}") for v in shown) + f" {other:>7.3f}")
    notes = [(r["id"], n) for r in ok for n in r.get("notes", [])]
    if notes:
        print("\nnotes:")
        for i, n in notes:
            print(f"  {i}: {n}")
    rejected = [r for r in records if r["status"] in ("rejected", "error")]
    if rejected:
        print(f"\nrejected by the planner ({len(rejected)}; not in the figures):")
        for r in rejected:
            print(f"  {r['id']}: {r['status']}: {r['reason']}")
    skipped = [r for r in records if r["status"] == "skipped"]
    if skipped:
        print(f"\nskipped, not expressible ({len(skipped)}):")
        for r in skipped:
            print(f"  {r['id']}: {r['reason']}")


def figures(records):
    """Per source and overall: the in-sample summary and the leave-one-source-out one."""
    ok = [r for r in records if r["status"] == "ok"]
    loso_failed = lambda rs: sum(r.get("loso", {}).get("status", "ok") != "ok" for r in rs)
    per_source, per_source_loso = {}, {}
    for s in sorted({r["source"] for r in records}):
        mine = [r for r in records if r["source"] == s]
        mine_ok = [r for r in mine if r["status"] == "ok"]
        per_source[s] = summary(mine_ok, len(mine), sum(r["status"] == "skipped" for r in mine),
                                sum(r["status"] in ("rejected", "error") for r in mine))
        per_source_loso[s] = summary(loso_results(mine_ok), len(mine_ok), 0, loso_failed(mine_ok))
    overall = summary(ok, len(records), sum(r["status"] == "skipped" for r in records),
                      sum(r["status"] in ("rejected", "error") for r in records))
    return per_source, per_source_loso, overall, summary(loso_results(ok), len(ok), 0, loso_failed(ok))


def print_figures(per_source, per_source_loso, overall, overall_loso, variants):
    pct = lambda v: fmt(v, ">7.1f", f"{'-':>7}")
    rho = lambda v: fmt(v, ">6.2f", f"{'-':>6}")
    print("\nper source: rows (evaluated/skipped/rejected); in sample: MAE, mean signed error (pred/meas - 1), mean "
          "Spearman;\nleave-one-source-out (the source's rows with every mechanism it motivated off, "
          "bench/planner/mechanisms.csv): the same")
    print(f"  {'source':<18} {'rows':>5} {'eval':>5} {'skip':>5} {'rej':>5} {'MAE %':>7} {'sign %':>7} {'rho':>6}"
          f"   {'LOSO MAE':>8} {'sign %':>7} {'rho':>6} {'off':>4}")
    for s, f in list(per_source.items()) + [("overall", overall)]:
        g = per_source_loso.get(s, overall_loso)
        off = len(variants[s].mechanisms) if s in variants else ("" if s == "overall" else "-")
        print(f"  {s:<18} {f['rows']:>5} {f['evaluated']:>5} {f['skipped']:>5} {f['rejected']:>5} "
              f"{pct(f['mae_pct'])} {pct(f['signed_pct'])} {rho(f['mean_spearman'])}   "
              f"{fmt(g['mae_pct'], '>8.1f', f'{chr(45):>8}')} {pct(g['signed_pct'])} {rho(g['mean_spearman'])} {off:>4}")
    print("\nSpearman rank correlation within groups (source + model + device, >= 3 evaluated rows), in sample and "
          "leave-one-source-out:")
    if not overall["groups"]:
        print("  (no group with 3 or more evaluated rows)")
    loso_groups = {(g["source"], g["model"], g["device"]): g for g in overall_loso["groups"]}
    for g in overall["groups"]:
        h = loso_groups.get((g["source"], g["model"], g["device"]), {})
        print(f"  {g['source']:<16} {g['model']:<40} {g['device'][:24]:<24} n={g['n']:<3} "
              f"rho={fmt(g['spearman'], '+.2f', 'undefined (constant)')}  "
              f"LOSO rho={fmt(h.get('spearman'), '+.2f', 'undefined')}")
    print(f"\nheadline ({overall['evaluated']} rows): MAE {pct(overall['mae_pct']).strip()}%, mean signed error "
          f"{fmt(overall['signed_pct'], '+.1f')}%, leave-one-source-out MAE {pct(overall_loso['mae_pct']).strip()}% "
          f"(signed {fmt(overall_loso['signed_pct'], '+.1f')}%, {overall_loso['evaluated']} rows), mean Spearman "
          f"{fmt(overall['mean_spearman'], '.2f')} (leave-one-source-out {fmt(overall_loso['mean_spearman'], '.2f')})")


def print_provenance(mechanisms, variants, presets, failed):
    print("\nmechanisms and preset values by the source that motivated them (mechanisms.csv):")
    for m in mechanisms:
        state = {"flag": f"off: {m['flag']} {m['off'] or '(not passed)'}", "preset": "off: prior value in "
                 + m["presets"], "kept": "kept on in every figure"}[m["kind"]]
        print(f"  {m['id']:<30} {m['motivated_by'] or '-':<38} {m['introduced']:<16} {state}")
    for r in failed:
        print(f"  leave-one-source-out failed for {r['id']}: {r['loso'].get('reason', r['loso']['status'])}")
    print("\ncluster presets by the sources whose rows use them (one source: the preset is checked by that source "
          "alone):")
    for preset, sources in sorted(presets.items()):
        flag = "  <- one source only" if len(sources) == 1 else ""
        print(f"  {preset:<42} {', '.join(sorted(sources))}{flag}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", nargs="+", metavar="FILE",
                    help="published CSVs (default: bench/planner/published/*.csv)")
    ap.add_argument("--rows", help="comma-separated row ids to evaluate (default: all)")
    limit = ap.add_mutually_exclusive_group()
    limit.add_argument("--max-mae", type=float, metavar="PCT", help="exit 1 if the overall MAE (%%) exceeds PCT")
    limit.add_argument("--max-mae-file", metavar="FILE", help="read --max-mae from FILE (one number)")
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 if a selected, expressible row is rejected by the planner or fails")
    ap.add_argument("--json", metavar="OUT", help="write every figure to OUT")
    ap.add_argument("--strata", default=os.environ.get("STRATA", os.path.join(REPO, "build", "bin", "strata")),
                    help="the strata binary (default: $STRATA, else build/bin/strata)")
    ap.add_argument("--keep", metavar="DIR", help="write the model TOMLs to DIR and keep them")
    ap.add_argument("--ablate", action="store_true",
                    help="also price each source's rows with each mechanism it motivated off alone")
    args = ap.parse_args()

    max_mae = args.max_mae
    try:
        mechanisms = read_mechanisms(MECHANISMS)
    except ProvenanceError as e:
        fail_usage(str(e))
    if args.max_mae_file:
        max_mae = read_max_mae_file(args.max_mae_file)
    if not (os.path.isfile(args.strata) and os.access(args.strata, os.X_OK)):
        fail_usage(f"no strata binary at {args.strata} (build it, or set STRATA / --strata)")

    files = args.csv or sorted(glob.glob(os.path.join(PUBLISHED, "*.csv")))
    if not files:
        fail_usage("no CSV files")
    rows = []
    for path in files:
        try:
            with open(path, newline="") as f:
                rows += list(csv.DictReader(f))
        except OSError as e:
            fail_usage(str(e))
    ids = [r["id"] for r in rows]
    if len(set(ids)) != len(ids):
        fail_usage("duplicate row ids: " + ", ".join(sorted({i for i in ids if ids.count(i) > 1})))
    if args.rows:
        wanted = [i.strip() for i in args.rows.split(",") if i.strip()]
        unknown_ids = [i for i in wanted if i not in set(ids)]
        if unknown_ids:
            fail_usage("unknown row ids: " + ", ".join(unknown_ids))
        rows = [r for r in rows if r["id"] in set(wanted)]

    work_ctx = None
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        work = args.keep
    else:
        work_ctx = tempfile.TemporaryDirectory(prefix="strata-validate-")
        work = work_ctx.name

    records = []
    for row in rows:
        reasons = skip_reasons(row)
        if reasons:
            records.append({"id": row["id"], "source": row["source"], "model": row["model"],
                            "device": row["device"], "status": "skipped", "reason": "; ".join(reasons)})
            continue
        records.append(evaluate(args.strata, row, work, Variant()))
    try:
        variants = leave_one_source_out(args.strata, rows, records, mechanisms, work)
        ablation = ablate(args.strata, rows, [r for r in records if r["status"] == "ok"], mechanisms, work) \
            if args.ablate else None
    except ProvenanceError as e:
        fail_usage(f"{MECHANISMS}: {e}")
    if work_ctx:
        work_ctx.cleanup()

    print_rows(records)
    per_source, per_source_loso, overall, overall_loso = figures(records)
    ok = [r for r in records if r["status"] == "ok"]
    print_figures(per_source, per_source_loso, overall, overall_loso, variants)
    print_provenance(mechanisms, variants, preset_sources(ok), [r for r in ok if r.get("loso", {}).get("status") != "ok"])
    if ablation is not None:
        print_ablation(ablation)

    status = 0
    if max_mae is not None:
        if overall["mae_pct"] is None:
            print(f"\nFAIL: no row evaluated, cannot check MAE <= {max_mae:g}%")
            status = 1
        elif overall["mae_pct"] > max_mae:
            print(f"\nFAIL: overall MAE {overall['mae_pct']:.1f}% exceeds {max_mae:g}%")
            status = 1
        else:
            print(f"\nOK: overall MAE {overall['mae_pct']:.1f}% <= {max_mae:g}%")
    if args.strict and overall["rejected"]:
        print(f"FAIL (--strict): {overall['rejected']} selected row(s) rejected or failed")
        status = 1

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"strata": args.strata, "csv": files, "max_mae_pct": max_mae, "rows": records,
                       "per_source": per_source, "overall": overall,
                       "leave_one_source_out": {"per_source": per_source_loso, "overall": overall_loso,
                                                "mechanisms_off": {s: v.mechanisms for s, v in variants.items()}},
                       "presets": {p: sorted(u) for p, u in preset_sources(ok).items()}, "ablation": ablation},
                      f, indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main())
