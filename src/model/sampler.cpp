#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/gpt2_block.h"

namespace strata {

namespace {

// Runs the model's ops eagerly on a dispatcher (see gpt2_block.h), with the
// attention core reading and extending the current layer's key/value cache.
class CachedEmitter {
 public:
  using Value = Tensor;

  CachedEmitter(const ParameterSet& params, Dispatcher& dispatcher, int64_t position)
      : params_(params), dispatcher_(dispatcher), position_(position) {}

  void use_cache(Tensor& keys, Tensor& values) {
    keys_ = &keys;
    values_ = &values;
  }

  Tensor param(const std::string& name, const Shape& shape) const {
    const Tensor& tensor = params_.get(name);
    STRATA_CHECK(tensor.shape() == shape, "parameter {} is {}, the model reads it as {}", name,
                 shape_str(tensor.shape()), shape_str(shape));
    return tensor;
  }
  Tensor op(const std::string& op, const std::vector<Tensor>& inputs, const Attrs& attrs, const std::string&) {
    return dispatcher_.call(op, inputs, attrs)[0];
  }
  // The new tokens' keys and values go into the cache at `position_`; their
  // queries attend to everything cached up to and including themselves.
  Tensor attention(const Tensor& qkv, int64_t heads, const std::string& label) {
    const int64_t width = qkv.shape()[2] / 3, count = qkv.shape()[1];
    keys_->narrow(1, position_, count).copy_from(qkv.narrow(2, width, width));
    values_->narrow(1, position_, count).copy_from(qkv.narrow(2, 2 * width, width));
    Tensor query = qkv.narrow(2, 0, width).clone();
    return op("attention_cached", {query, *keys_, *values_}, {{"n_head", heads}, {"position", position_}}, label);
  }

 private:
  const ParameterSet& params_;
  Dispatcher& dispatcher_;
  int64_t position_;
  Tensor* keys_ = nullptr;
  Tensor* values_ = nullptr;
};

}  // namespace

GPT2Sampler::GPT2Sampler(const GPT2Config& config, const ParameterSet& params, Dispatcher& dispatcher)
    : config_(config), params_(params), dispatcher_(dispatcher) {
  for (int64_t layer = 0; layer < config.n_layer; ++layer) {
    key_cache_.push_back(Tensor::zeros({1, config.block_size, config.n_embd}, DType::F32));
    value_cache_.push_back(Tensor::zeros({1, config.block_size, config.n_embd}, DType::F32));
  }
}

Tensor GPT2Sampler::feed(const std::vector<int32_t>& tokens) {
  const int64_t count = static_cast<int64_t>(tokens.size());
  STRATA_CHECK(count > 0 && length_ + count <= config_.block_size, "feeding {} tokens at {}", count, length_);
  Tensor ids = Tensor::empty({1, count}, DType::I32);
  Tensor positions = Tensor::empty({count}, DType::I32);
  for (int64_t i = 0; i < count; ++i) {
    ids.data<int32_t>()[i] = tokens[static_cast<size_t>(i)];
    positions.data<int32_t>()[i] = static_cast<int32_t>(length_ + i);
  }
  CachedEmitter emit(params_, dispatcher_, length_);
  Tensor x = gpt2_embed(emit, config_, ids, positions);
  for (int64_t layer = 0; layer < config_.n_layer; ++layer) {
    emit.use_cache(key_cache_[static_cast<size_t>(layer)], value_cache_[static_cast<size_t>(layer)]);
    x = gpt2_block(emit, config_, x, gpt2_layer_prefix(layer));
  }
  length_ += count;
  // Only the last position's logits are needed: the head reads just that row.
  Tensor last = gpt2_final_norm(emit, config_, x).narrow(1, count - 1, 1).clone();
  return gpt2_lm_head(emit, config_, last).reshape({config_.vocab_size});
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
