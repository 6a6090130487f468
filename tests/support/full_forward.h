#pragma once
// The whole-graph forward pass of a model over one row of tokens: the reference the KV-cache
// sampler is checked against.
#include <vector>

#include "graph/executor.h"
#include "model/model_graph.h"

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

}  // namespace strata::testing
