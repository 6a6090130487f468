#pragma once
// Autoregressive generation with a per-layer key/value cache, run op by op on
// a dispatcher (no graph: the number of new tokens changes every call).
#include <cstdint>
#include <vector>

#include "model/family.h"
#include "model/model_config.h"
#include "model/parameters.h"
#include "ops/dispatcher.h"

namespace strata {

struct SamplingOptions {
  double temperature = 1.0;  // 0 = greedy
  int64_t top_k = 0;         // 0 = the whole vocabulary
  uint64_t seed = 1;
};

class Sampler {
 public:
  Sampler(const ModelConfig& config, const ParameterSet& params, Dispatcher& dispatcher);

  // Returns `count` new token ids following `prompt` (which must not be empty).
  // When the context reaches model.block_size, the cache is rebuilt from the
  // last block_size / 2 tokens (a sliding window).
  std::vector<int32_t> generate(const std::vector<int32_t>& prompt, int64_t count, const SamplingOptions& options);

  // Logits [V] for the next token after feeding `tokens` at the cache's current end.
  Tensor feed(const std::vector<int32_t>& tokens);
  void reset() { length_ = 0; }

 private:
  int32_t pick(const Tensor& logits, const SamplingOptions& options, uint64_t draw) const;

  ModelConfig config_;
  const ModelFamily& family_;
  const ParameterSet& params_;
  Dispatcher& dispatcher_;
  std::vector<Tensor> key_cache_, value_cache_;  // per layer [1, block_size, C]
  int64_t length_ = 0;
};

}  // namespace strata
