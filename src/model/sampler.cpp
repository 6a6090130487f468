#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace strata {

GPT2Sampler::GPT2Sampler(const GPT2Config& config, const ParameterSet& params, Dispatcher& dispatcher)
    : config_(config), params_(params), dispatcher_(dispatcher) {
  for (int64_t layer = 0; layer < config.n_layer; ++layer) {
    key_cache_.push_back(Tensor::zeros({1, config.block_size, config.n_embd}, DType::F32));
    value_cache_.push_back(Tensor::zeros({1, config.block_size, config.n_embd}, DType::F32));
  }
}

Tensor GPT2Sampler::feed(const std::vector<int32_t>& tokens) {
  const int64_t count = static_cast<int64_t>(tokens.size());
  const int64_t c = config_.n_embd;
  STRATA_CHECK(count > 0 && length_ + count <= config_.block_size, "feeding {} tokens at {}", count, length_);
  Tensor ids = Tensor::empty({1, count}, DType::I32);
  Tensor positions = Tensor::empty({count}, DType::I32);
  for (int64_t i = 0; i < count; ++i) {
    ids.data<int32_t>()[i] = tokens[static_cast<size_t>(i)];
    positions.data<int32_t>()[i] = static_cast<int32_t>(length_ + i);
  }
  auto call1 = [&](const std::string& op, const Tensors& inputs, const Attrs& attrs = {}) {
    return dispatcher_.call(op, inputs, attrs)[0];
  };
  auto param = [&](const std::string& name) { return params_.get(name); };
  auto layernorm = [&](const Tensor& x, const std::string& name) {
    return call1("layernorm", {x, param(name + ".weight"), param(name + ".bias")}, {{"eps", config_.layer_norm_eps}});
  };
  auto linear = [&](const Tensor& x, const std::string& name) {
    return call1("linear", {x, param(name + ".weight"), param(name + ".bias")});
  };

  Tensor x = call1("add", {call1("embedding", {param("transformer.wte.weight"), ids}),
                           call1("embedding", {param("transformer.wpe.weight"), positions})});
  for (int64_t layer = 0; layer < config_.n_layer; ++layer) {
    std::string p = "transformer.h." + std::to_string(layer) + ".";
    Tensor qkv = linear(layernorm(x, p + "ln_1"), p + "attn.c_attn");
    Tensor& keys = key_cache_[static_cast<size_t>(layer)];
    Tensor& values = value_cache_[static_cast<size_t>(layer)];
    keys.narrow(1, length_, count).copy_from(qkv.narrow(2, c, c));
    values.narrow(1, length_, count).copy_from(qkv.narrow(2, 2 * c, c));
    Tensor query = qkv.narrow(2, 0, c).clone();
    Tensor attended =
        call1("attention_cached", {query, keys, values}, {{"n_head", config_.n_head}, {"position", length_}});
    x = call1("add", {x, linear(attended, p + "attn.c_proj")});
    Tensor hidden = call1("gelu", {linear(layernorm(x, p + "ln_2"), p + "mlp.c_fc")});
    x = call1("add", {x, linear(hidden, p + "mlp.c_proj")});
  }
  length_ += count;
  Tensor last = layernorm(x, "transformer.ln_f").narrow(1, count - 1, 1).clone();
  return call1("matmul", {last, param("transformer.wte.weight")}, {{"trans_a", false}, {"trans_b", true}})
      .reshape({config_.vocab_size});
}

int32_t GPT2Sampler::pick(const Tensor& logits, const SamplingOptions& options, uint64_t draw) const {
  const float* values = logits.data<float>();
  const int64_t vocab = logits.numel();
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  if (options.temperature <= 0) {
    return *std::max_element(order.begin(), order.end(), [&](int32_t a, int32_t b) { return values[a] < values[b]; });
  }
  int64_t keep = options.top_k > 0 ? std::min(options.top_k, vocab) : vocab;
  // Ties broken by token id so the choice never depends on the sort's internals.
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), [&](int32_t a, int32_t b) {
    return values[a] != values[b] ? values[a] > values[b] : a < b;
  });
  std::vector<double> weights(static_cast<size_t>(keep));
  double top = values[order[0]];
  double total = 0;
  for (int64_t i = 0; i < keep; ++i) {
    weights[static_cast<size_t>(i)] = std::exp((values[order[static_cast<size_t>(i)]] - top) / options.temperature);
    total += weights[static_cast<size_t>(i)];
  }
  double target = CounterRng(options.seed).uniform(stream_id("sampling"), draw) * total;
  for (int64_t i = 0; i < keep; ++i) {
    target -= weights[static_cast<size_t>(i)];
    if (target <= 0) return order[static_cast<size_t>(i)];
  }
  return order[static_cast<size_t>(keep - 1)];
}

std::vector<int32_t> GPT2Sampler::generate(const std::vector<int32_t>& prompt, int64_t count,
                                           const SamplingOptions& options) {
  if (prompt.empty()) fail("sampling needs a non-empty prompt");
  for (int32_t token : prompt) {
    if (token < 0 || token >= config_.vocab_size) fail("prompt token {} is outside the vocabulary", token);
  }
  std::vector<int32_t> context = prompt;
  if (static_cast<int64_t>(context.size()) > config_.block_size) {
    context.erase(context.begin(), context.end() - config_.block_size);
  }
  reset();
  Tensor logits = feed(context);
  std::vector<int32_t> generated;
  for (int64_t step = 0; step < count; ++step) {
    int32_t next = pick(logits, options, static_cast<uint64_t>(step));
    generated.push_back(next);
    context.push_back(next);
    if (step + 1 == count) break;
    if (length_ == config_.block_size) {
      context.erase(context.begin(), context.end() - config_.block_size / 2);
      reset();
      logits = feed(context);
    } else {
      logits = feed({next});
    }
  }
  return generated;
}

}  // namespace strata
