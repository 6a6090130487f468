#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/family.h"

namespace strata {

namespace {

// Runs a family's ops eagerly on a dispatcher (model/family.h): a value is an index into the
// tensors made so far. The attention core reads and extends the current layer's key/value cache.
class CachedEmitter final : public ModelEmitter {
 public:
  CachedEmitter(const ParameterSet& params, Dispatcher& dispatcher, int64_t position)
      : params_(params), dispatcher_(dispatcher), position_(position) {}

  int input(Tensor tensor) {
    values_.push_back(std::move(tensor));
    return static_cast<int>(values_.size() - 1);
  }
  Tensor& value(int id) { return values_.at(static_cast<size_t>(id)); }

  void use_cache(Tensor& keys, Tensor& values) {
    keys_ = &keys;
    values_cache_ = &values;
  }

  int param(const std::string& name, const Shape& shape) override {
    const Tensor& tensor = params_.get(name);
    STRATA_CHECK(tensor.shape() == shape, "parameter {} is {}, the model reads it as {}", name,
                 shape_str(tensor.shape()), shape_str(shape));
    return input(tensor);
  }
  Shape shape(int value) const override { return values_.at(static_cast<size_t>(value)).shape(); }
  std::vector<int> ops(const std::string& op, const std::vector<int>& inputs, const Attrs& attrs,
                       const std::string&) override {
    std::vector<Tensor> tensors;
    for (int id : inputs) tensors.push_back(value(id));
    std::vector<int> outputs;
    for (Tensor& output : dispatcher_.call(op, tensors, attrs)) outputs.push_back(input(std::move(output)));
    return outputs;
  }
  // The new tokens' keys and values go into the cache at `position_`; their queries attend to
  // everything cached up to and including themselves. Packed GPT-2 qkv holds q, k, v side by side.
  int attention(const std::string& op, const std::vector<int>& inputs, const Attrs& attrs,
                const std::string& label) override {
    Tensor query, keys, values;
    if (op == "attention") {
      const Tensor& qkv = value(inputs.at(0));
      const int64_t width = qkv.shape()[2] / 3;
      query = qkv.narrow(2, 0, width).clone();
      keys = qkv.narrow(2, width, width);
      values = qkv.narrow(2, 2 * width, width);
    } else {
      STRATA_CHECK(op == "grouped_attention", "the sampler has no cache for attention op {}", op);
      query = value(inputs.at(0));
      keys = value(inputs.at(1));
      values = value(inputs.at(2));
    }
    const int64_t count = query.shape()[1];
    keys_->narrow(1, position_, count).copy_from(keys);
    values_cache_->narrow(1, position_, count).copy_from(values);
    Attrs cached = attrs;
    cached.set("position", position_);
    return this->op("attention_cached", {input(query), input(*keys_), input(*values_cache_)}, cached, label);
  }

 private:
  const ParameterSet& params_;
  Dispatcher& dispatcher_;
  int64_t position_;
  std::vector<Tensor> values_;
  Tensor* keys_ = nullptr;
  Tensor* values_cache_ = nullptr;
};

}  // namespace

Sampler::Sampler(const ModelConfig& config, const ParameterSet& params, Dispatcher& dispatcher)
    : config_(config), family_(model_family(config)), params_(params), dispatcher_(dispatcher) {
  const int64_t width = family_.kv_width(config);
  for (int64_t layer = 0; layer < config.n_layer; ++layer) {
    key_cache_.push_back(Tensor::zeros({1, config.block_size, width}, DType::F32, dispatcher.backend().device()));
    value_cache_.push_back(Tensor::zeros({1, config.block_size, width}, DType::F32, dispatcher.backend().device()));
  }
}

Tensor Sampler::feed(const std::vector<int32_t>& tokens) {
  const int64_t count = static_cast<int64_t>(tokens.size());
  STRATA_CHECK(count > 0 && length_ + count <= config_.block_size, "feeding {} tokens at {}", count, length_);
  Tensor ids = Tensor::empty({1, count}, DType::I32);
  Tensor positions = Tensor::empty({count}, DType::I32);
  for (int64_t i = 0; i < count; ++i) {
    ids.data<int32_t>()[i] = tokens[static_cast<size_t>(i)];
    positions.data<int32_t>()[i] = static_cast<int32_t>(length_ + i);
  }
  const Device& device = dispatcher_.backend().device();
  CachedEmitter emit(params_, dispatcher_, length_);
  const int at = emit.input(positions.to_device(device));
  int x = family_.embed(emit, config_, emit.input(ids.to_device(device)), at);
  for (int64_t layer = 0; layer < config_.n_layer; ++layer) {
    emit.use_cache(key_cache_[static_cast<size_t>(layer)], value_cache_[static_cast<size_t>(layer)]);
    x = family_.block(emit, config_, x, at, layer_prefix(config_, layer));
  }
  length_ += count;
  // Only the last position's logits are needed: the head reads just that row.
  const int normed = family_.final_norm(emit, config_, x);
  const int last = emit.input(emit.value(normed).narrow(1, count - 1, 1).clone());
  return emit.value(family_.lm_head(emit, config_, last)).reshape({config_.vocab_size});
}

int32_t Sampler::pick(const Tensor& device_logits, const SamplingOptions& options, uint64_t draw) const {
  const Tensor logits = device_logits.to_host();  // the choice is made on the host: one row of logits per token
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

std::vector<int32_t> Sampler::generate(const std::vector<int32_t>& prompt, int64_t count,
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
