#include "parallel/tensor_parallel_group.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "parallel/parallelize.h"

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

ParallelDimension tensor_parallel_dimension() {
  return {.name = "tp", .nesting = 0, .pass = [](const Graph& forward, const DimensionPassInput& input) {
            std::optional<ParallelForward> split;
            if (input.layout.tp.degree <= 1) return split;
            TensorParallelForward part = parallelize_tensors(forward, input.plan, input.layout.tp);
            split = ParallelForward{.rewritten = std::move(part.rewritten),
                                    .layouts = std::move(part.layouts),
                                    .gradient_labels = std::move(part.gradient_labels)};
            return split;
          }};
}

}  // namespace strata
