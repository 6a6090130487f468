#include "parallel/tensor_parallel_group.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace strata {

ExactSquareSum exact_sum_over(comm::Communicator& group, const ExactSquareSum& mine) {
  // Integer bins: gathered and added here, in any order, they stay exact (an f32 reduction would not).
  std::array<int64_t, ExactSquareSum::kWords> words = mine.words();
  std::vector<int64_t> all(words.size() * static_cast<size_t>(group.size()));
  group.all_gather(words.data(), all.data(), words.size(), DType::I64);
  ExactSquareSum total;
  for (int r = 0; r < group.size(); ++r) total.merge(ExactSquareSum::from_words(all.data() + r * words.size()));
  return total;
}

TensorParallel::TensorParallel(comm::Communicator group) : group_(std::move(group)) {}

ExactSquareSum TensorParallel::sum(const ExactSquareSum& mine) { return group_ ? exact_sum_over(*group_, mine) : mine; }

void TensorParallel::assemble(const ParameterShard& mine, const Tensor& shard, Tensor& full) {
  if (!mine.split()) {
    full.copy_from(shard);
    return;
  }
  // Shards differ by at most a vocabulary row: every rank sends a slot of the largest, padded.
  size_t slot = 0;
  for (int r = 0; r < degree(); ++r) slot = std::max(slot, static_cast<size_t>(shape_numel(mine.of_rank(r).shape())));
  std::vector<float> padded(slot, 0.0f), all(slot * static_cast<size_t>(degree()));
  std::memcpy(padded.data(), shard.data<float>(), shard.nbytes());
  group_->all_gather(padded.data(), all.data(), slot, DType::F32);
  for (int r = 0; r < degree(); ++r) {
    ParameterShard theirs = mine.of_rank(r);
    theirs.place(Tensor::borrow(all.data() + static_cast<size_t>(r) * slot, theirs.shape(), DType::F32), full);
  }
}

}  // namespace strata
