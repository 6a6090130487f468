#include "data/token_loader.h"

#include "core/error.h"

namespace strata {

TokenLoader::TokenLoader(const std::vector<std::filesystem::path>& shards, int64_t batch_size, int64_t seq_len,
                         int64_t vocab_size)
    : batch_size_(batch_size), seq_len_(seq_len), vocab_size_(vocab_size) {
  if (shards.empty()) fail("token loader: no shard files given");
  if (batch_size <= 0 || seq_len <= 0) {
    fail("token loader over '{}': batch size {} and sequence length {} must be positive", shards.front().string(),
         batch_size, seq_len);
  }
  const int64_t window = batch_size * seq_len;
  for (const auto& path : shards) {
    shards_.emplace_back(path);
    if (shards_.back().size() < window + 1) {
      fail("token shard '{}' has {} tokens, too few for one batch of B={} rows by T={} tokens (needs B*T+1 = {})",
           path.string(), shards_.back().size(), batch_size, seq_len, window + 1);
    }
  }
}

void TokenLoader::next(Tensor& inputs, Tensor& targets) {
  const Shape shape{batch_size_, seq_len_};
  for (const Tensor* tensor : {&inputs, &targets}) {
    STRATA_CHECK(tensor->dtype() == DType::I32 && tensor->shape() == shape && tensor->is_contiguous(),
                 "batch tensors must be contiguous i32 {}, got {} {}", shape_str(shape), dtype_name(tensor->dtype()),
                 shape_str(tensor->shape()));
  }
  const int64_t window = batch_size_ * seq_len_;
  LoaderPosition start = advance();
  const TokenShard& shard = shards_[static_cast<size_t>(start.shard)];
  shard.read(start.offset, window, inputs.data<int32_t>());
  shard.read(start.offset + 1, window, targets.data<int32_t>());
  // Inputs and targets overlap but for one token each end: together they are window + 1 tokens.
  const int32_t* tokens[] = {inputs.data<int32_t>(), targets.data<int32_t>() + window - 1};
  const int64_t counts[] = {window, 1};
  for (int part = 0; part < 2; ++part) {
    for (int64_t i = 0; i < counts[part]; ++i) {
      const int32_t token = tokens[part][i];
      if (token < 0 || token >= vocab_size_) {
        fail("token shard '{}': token {} at offset {} is outside the model's vocabulary [0, {}) (model.vocab_size)",
             shard.path().string(), token, start.offset + (part == 0 ? i : window), vocab_size_);
      }
    }
  }
}

void TokenLoader::skip(int64_t batches) {
  for (int64_t i = 0; i < batches; ++i) advance();
}

LoaderPosition TokenLoader::advance() {
  const int64_t window = batch_size_ * seq_len_;
  if (position_.offset + window + 1 > shards_[static_cast<size_t>(position_.shard)].size()) {
    position_.shard = (position_.shard + 1) % static_cast<int64_t>(shards_.size());
    position_.offset = 0;
  }
  LoaderPosition start = position_;
  position_.offset += window;
  return start;
}

TokenBatch TokenLoader::next() {
  TokenBatch batch{Tensor::empty({batch_size_, seq_len_}, DType::I32),
                   Tensor::empty({batch_size_, seq_len_}, DType::I32)};
  next(batch.inputs, batch.targets);
  return batch;
}

void TokenLoader::seek(LoaderPosition position) {
  const int64_t count = static_cast<int64_t>(shards_.size());
  if (position.shard < 0 || position.shard >= count) {
    fail("token loader: cannot seek to shard {}: there are {} shards (first '{}')", position.shard, count,
         shards_.front().path().string());
  }
  const TokenShard& shard = shards_[static_cast<size_t>(position.shard)];
  if (position.offset < 0 || position.offset > shard.size()) {
    fail("token loader: cannot seek to offset {} of shard '{}', which has {} tokens", position.offset,
         shard.path().string(), shard.size());
  }
  position_ = position;
}

}  // namespace strata
