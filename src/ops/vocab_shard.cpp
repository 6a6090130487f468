#include "ops/vocab_shard.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "ops/collective_group.h"

namespace strata {

VocabShard vocab_shard(const std::string& op, const Attrs& attrs, int64_t rows) {
  const bool has_start = attrs.has("vocab_start"), has_size = attrs.has("vocab_size");
  if (!has_start && !has_size) return {0, rows, rows};
  if (has_start != has_size) fail("op '{}': attrs 'vocab_start' and 'vocab_size' go together", op);
  VocabShard shard{attrs.get_int("vocab_start"), rows, attrs.get_int("vocab_size")};
  if (shard.start < 0 || shard.start + shard.rows > shard.size) {
    fail("op '{}': a shard of {} vocabulary rows from row {} does not fit a vocabulary of {}", op, shard.rows,
         shard.start, shard.size);
  }
  return shard;
}

void set_vocab_shard(Attrs& attrs, const VocabShard& shard) {
  attrs.set("vocab_start", shard.start);
  attrs.set("vocab_size", shard.size);
}

template <typename T>
void combine_vocab_shards(const Attrs& attrs, T* lse, T* target_logit, size_t positions) {
  if (!attrs.has("group")) return;
  CollectiveGroup& group = collective_group(attrs.get_string("group"));
  if (group.size() != attrs.get_int("ranks")) {
    fail("op 'cross_entropy': the graph was built for {} ranks in group '{}', but that group has {}",
         attrs.get_int("ranks"), attrs.get_string("group"), group.size());
  }
  if (group.size() == 1) return;
  // Exactly one rank holds each target, the others add zeros: the sum is exact.
  group.all_reduce_sum(target_logit, positions, dtype_of<T>());
  const size_t ranks = static_cast<size_t>(group.size());
  std::vector<T> all(positions * ranks);
  group.all_gather_bytes(lse, all.data(), positions * sizeof(T));
  for (size_t p = 0; p < positions; ++p) {
    double largest = -std::numeric_limits<double>::infinity();
    for (size_t r = 0; r < ranks; ++r) largest = std::max(largest, static_cast<double>(all[r * positions + p]));
    double sum = 0;
    for (size_t r = 0; r < ranks; ++r) sum += std::exp(static_cast<double>(all[r * positions + p]) - largest);
    lse[p] = static_cast<T>(largest + std::log(sum));
  }
}

template void combine_vocab_shards<float>(const Attrs&, float*, float*, size_t);
template void combine_vocab_shards<double>(const Attrs&, double*, double*, size_t);

}  // namespace strata
