#pragma once
// The whole-graph forward pass of a model over one row of tokens: the reference the KV-cache
// sampler is checked against.
#include <vector>

#include <gtest/gtest.h>

#include "graph/executor.h"
#include "model/model_graph.h"
#include "model/sampler.h"

namespace strata::testing {

// Logits [1, T, V] of `tokens` under `params`, run on `dispatcher`.
inline Tensor full_forward_logits(const ModelConfig& config, const ParameterSet& params, Dispatcher& dispatcher,
                                  const std::vector<int32_t>& tokens) {
  const int64_t seq = static_cast<int64_t>(tokens.size());
  ModelGraph model = build_model_graph(config, 1, seq, false);
  CompiledGraph graph(model.graph, dispatcher, {model.logits});
  for (size_t i = 0; i < params.size(); ++i) graph.bind(model.params[i], params.tensor(i));
  Tensor ids = Tensor::empty({1, seq}, DType::I32);
  for (int64_t i = 0; i < seq; ++i) ids.data<int32_t>()[i] = tokens[static_cast<size_t>(i)];
  graph.bind(model.tokens, ids);
  graph.bind(model.targets, ids);
  graph.bind(model.positions, position_ids(seq));
  graph.run();
  return graph.tensor(model.logits).clone();
}

// The sampler fed the first three tokens at once, then one at a time, gives the full graph's logits
// of the last position within 1e-5.
inline void expect_cached_decoding_matches(const ModelConfig& config, const ParameterSet& params,
                                           Dispatcher& dispatcher, const std::vector<int32_t>& tokens,
                                           const std::string& what) {
  Sampler sampler(config, params, dispatcher);
  sampler.feed({tokens[0], tokens[1], tokens[2]});
  Tensor cached;
  for (size_t i = 3; i < tokens.size(); ++i) cached = sampler.feed({tokens[i]});
  const int64_t seq = static_cast<int64_t>(tokens.size());
  const Tensor logits = full_forward_logits(config, params, dispatcher, tokens);
  for (int64_t v = 0; v < config.vocab_size; ++v) {
    EXPECT_NEAR(cached.data<float>()[v], logits.data<float>()[(seq - 1) * config.vocab_size + v], 1e-5)
        << what << " token " << v;
  }
}

}  // namespace strata::testing
