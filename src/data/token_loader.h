#pragma once
// Sequential micro-batches over token shards. With B rows and T columns, a
// batch at offset p of the current shard takes tokens [p, p + B*T) as inputs
// and [p + 1, p + B*T + 1) as targets, both row-major [B, T], then p += B*T.
// When the next window would run past the shard (it needs p + B*T + 1 <=
// count), the loader moves to the next shard at p = 0, wrapping from the last
// shard to the first. The position (shard, offset) fully determines what
// comes next, so saving and restoring it resumes exactly.
#include <cstdint>
#include <filesystem>
#include <vector>

#include "core/tensor.h"
#include "data/token_shard.h"

namespace strata {

struct LoaderPosition {
  int64_t shard = 0;
  int64_t offset = 0;
};

struct TokenBatch {
  Tensor inputs;   // i32 [B, T]
  Tensor targets;  // i32 [B, T]
};

class TokenLoader {
 public:
  // Every shard must hold at least B*T + 1 tokens. A token outside
  // [0, vocab_size) is an error naming its shard and offset when its batch is read.
  TokenLoader(const std::vector<std::filesystem::path>& shards, int64_t batch_size, int64_t seq_len,
              int64_t vocab_size);

  // Fills contiguous i32 [B, T] tensors with the next batch.
  void next(Tensor& inputs, Tensor& targets);
  TokenBatch next();
  // Moves past `batches` batches as next() would, without reading them (the
  // windows other data-parallel ranks take).
  void skip(int64_t batches);

  LoaderPosition position() const { return position_; }
  // Any shard index and offset in [0, that shard's size] is accepted.
  void seek(LoaderPosition position);

  int64_t batch_size() const { return batch_size_; }
  int64_t seq_len() const { return seq_len_; }
  const std::vector<TokenShard>& shards() const { return shards_; }

 private:
  LoaderPosition advance();  // the next window's start; moves past it

  std::vector<TokenShard> shards_;
  int64_t batch_size_;
  int64_t seq_len_;
  int64_t vocab_size_;
  LoaderPosition position_;
};

}  // namespace strata
