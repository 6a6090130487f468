#include "parallel/pipeline_parallel.h"

#include <vector>

#include "core/error.h"
#include "parallel/parallelize.h"
#include "parallel/tensor_parallel_group.h"

namespace strata {

PipelineParallel::PipelineParallel(comm::Communicator group) : group_(std::move(group)) {}

std::vector<std::vector<int>> PipelineParallel::holders(size_t count, const std::vector<size_t>& held) {
  std::vector<int32_t> mine(count, 0), all(count * static_cast<size_t>(degree()));
  for (size_t index : held) mine.at(index) = 1;
  if (group_) {
    group_->all_gather(mine.data(), all.data(), count, DType::I32);
  } else {
    all = mine;
  }
  std::vector<std::vector<int>> holders(count);
  for (int stage = 0; stage < degree(); ++stage) {
    for (size_t i = 0; i < count; ++i) {
      if (all[static_cast<size_t>(stage) * count + i]) holders[i].push_back(stage);
    }
  }
  return holders;
}

comm::Handle PipelineParallel::send_async(const Tensor& tensor, int stage) {
  STRATA_CHECK(group_.has_value(), "a pipeline transfer without stages");
  STRATA_CHECK(tensor.is_contiguous(), "a pipeline send of a strided tensor");
  return group_->send_async(tensor.raw(), static_cast<size_t>(tensor.numel()), tensor.dtype(), stage);
}

void PipelineParallel::receive(Tensor& tensor, int stage) {
  STRATA_CHECK(group_.has_value(), "a pipeline transfer without stages");
  STRATA_CHECK(tensor.is_contiguous(), "a pipeline receive into a strided tensor");
  group_->recv(tensor.raw(), static_cast<size_t>(tensor.numel()), tensor.dtype(), stage);
}

void PipelineParallel::sum_tied_gradient(Tensor& grad) {
  if (degree() == 1) return;
  STRATA_CHECK(first() || last(), "stage {} holds no copy of the tied embedding", stage());
  const int peer = first() ? degree() - 1 : 0;
  Tensor theirs = Tensor::empty(grad.shape(), grad.dtype());
  comm::Handle sent = send_async(grad, peer);
  receive(theirs, peer);
  sent.wait();
  // a + b is b + a in IEEE arithmetic: both stages get the same bits.
  float* mine = grad.data<float>();
  const float* other = theirs.data<float>();
  for (int64_t i = 0; i < grad.numel(); ++i) mine[i] += other[i];
}

std::vector<double> PipelineParallel::from_last_stage(std::vector<double> values) {
  if (degree() == 1 || values.empty()) return values;
  group_->broadcast(values.data(), values.size(), DType::F64, degree() - 1);
  return values;
}

ExactSquareSum PipelineParallel::sum(const ExactSquareSum& mine) { return group_ ? exact_sum_over(*group_, mine) : mine; }

ParallelDimension pipeline_parallel_dimension() {
  return {.name = "pp", .nesting = 2, .point_to_point = true,
          .pass = [](const Graph& forward, const DimensionPassInput& input) {
            std::optional<ParallelForward> part;
            if (input.layout.part.parts() > 1) part = cut_pipeline_part(forward, input.layout.part, input.layer_prefix);
            return part;
          }};
}

}  // namespace strata
