#pragma once
// A trained model leaves Strata as a directory HuggingFace's from_pretrained
// reads (GPT2LMHeadModel, LlamaForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM,
// Qwen2MoeForCausalLM, OlmoeForCausalLM): the parameters by their HuggingFace names (a tied lm_head is
// not stored; a mixture of experts' stacked parameters one tensor per expert, as the Hub stores them:
// `...experts.{e}.w1.weight`) in `model.safetensors`, or past `max_shard_bytes` in
// `model-0000i-of-0000n.safetensors` shards with `model.safetensors.index.json`
// (huggingface_hub's convention: greedy in parameter order, a tensor larger
// than the limit alone in its shard, `total_size` the payload bytes), every
// file with `__metadata__ {"format": "pt"}`; `config.json` (the family's, with
// bos/eos/pad ids from the run's tokenizer, null where it has none); and the
// run's tokenizer as transformers' fast tokenizer reads it (`tokenizer.json`,
// converted from a SentencePiece `tokenizer.model`, which is copied too;
// `tokenizer_config.json`, `special_tokens_map.json`; data/hf_tokenizer_files.h).
#include <cstddef>
#include <filesystem>

#include "ckpt/checkpoint.h"

namespace strata {

inline constexpr size_t kDefaultHfShardBytes = 5'000'000'000;  // huggingface_hub's MAX_SHARD_SIZE

// Writes `checkpoint`'s model (any layout) into `out`, which must not exist or
// be empty. Holds one output shard's parameters in memory at a time (a stacked parameter whole while
// any of its experts' tensors is in the shard).
void export_hf(const Checkpoint& checkpoint, const std::filesystem::path& out,
               size_t max_shard_bytes = kDefaultHfShardBytes);

}  // namespace strata
