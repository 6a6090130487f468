#pragma once
// Vocabulary-parallel lookups and losses (Megatron's VocabParallelEmbedding and
// vocab-parallel cross-entropy): an `embedding` or `cross_entropy` node whose
// attrs carry `vocab_start` and `vocab_size` holds rows (logit columns)
// [vocab_start, vocab_start + rows) of a vocabulary of `vocab_size`. Ids and
// targets are checked against the whole vocabulary; those outside the shard
// read zeros (embedding) or contribute no target logit (cross_entropy). A
// sharded cross_entropy also names the `group` (and its `ranks`) that holds
// the other shards, and combines the shards' log-sum-exps and target logits
// over it, so the loss and lse are the whole vocabulary's on every rank and no
// rank ever holds all the logits.
#include <cstddef>
#include <cstdint>

#include "ops/attrs.h"

namespace strata {

struct VocabShard {
  int64_t start = 0;  // the first vocabulary row held
  int64_t rows = 0;   // rows held
  int64_t size = 0;   // the whole vocabulary

  bool holds(int64_t id) const { return id >= start && id < start + rows; }
  bool whole() const { return start == 0 && rows == size; }
};

// The shard an embedding weight or logits with `rows` rows (columns) hold:
// the whole vocabulary without the attrs. Fails naming `op` when the attrs
// are half given or the shard does not fit inside the vocabulary.
VocabShard vocab_shard(const std::string& op, const Attrs& attrs, int64_t rows);

// Sets the attrs of a shard on `attrs`.
void set_vocab_shard(Attrs& attrs, const VocabShard& shard);

// For a sharded cross_entropy (attrs with `group`): turns each position's
// log-sum-exp over this shard into the log-sum-exp over the whole vocabulary
// (the shards' values combined in rank order, in double: the same bits on
// every rank), and each position's target logit (0 where the target lies in
// another shard) into the target's logit. Nothing to do without a group.
template <typename T>
void combine_vocab_shards(const Attrs& attrs, T* lse, T* target_logit, size_t positions);

}  // namespace strata
