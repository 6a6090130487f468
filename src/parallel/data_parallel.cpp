#include "parallel/data_parallel.h"

#include <algorithm>

#include "core/error.h"
#include "core/key_checks.h"
#include "parallel/parallel_settings.h"

namespace strata {

DataParallel::DataParallel(comm::Communicator group, std::vector<std::string> dimensions)
    : group_(std::move(group)), dimensions_(std::move(dimensions)) {}

DataParallel DataParallel::of(DeviceMesh* mesh) { return over(mesh, batch_dimensions()); }

DataParallel DataParallel::over(DeviceMesh* mesh, const std::vector<std::string>& dimensions) {
  if (!mesh || dimensions.empty()) return DataParallel();
  return DataParallel(mesh->group_across(dimensions), dimensions);
}

MicroBatchShare DataParallel::share(int64_t micro_batches) const {
  const int64_t d = degree(), r = rank();
  int64_t first = r * micro_batches / d;
  return {first, (r + 1) * micro_batches / d - first};
}

comm::Handle DataParallel::sum_async(Tensor& bucket) {
  STRATA_CHECK(group_.has_value(), "summing gradients over ranks in a single process");
  return group_->all_reduce_async(bucket.data<float>(), bucket.data<float>(), static_cast<size_t>(bucket.numel()),
                                  DType::F32, comm::ReduceOp::Sum);
}

comm::Handle DataParallel::reduce_scatter_async(const Tensor& in, Tensor& block) {
  STRATA_CHECK(group_.has_value(), "reduce-scattering gradients in a single process");
  STRATA_CHECK(in.numel() == block.numel() * degree(), "reduce-scatter of {} elements into blocks of {}", in.numel(),
               block.numel());
  return group_->reduce_scatter_async(in.data<float>(), block.data<float>(), static_cast<size_t>(block.numel()),
                                      DType::F32, comm::ReduceOp::Sum);
}

comm::Handle DataParallel::all_gather_async(const Tensor& block, Tensor& out) {
  STRATA_CHECK(group_.has_value(), "all-gathering gradients in a single process");
  STRATA_CHECK(out.numel() == block.numel() * degree(), "all-gather of blocks of {} into {} elements",
               block.numel(), out.numel());
  return group_->all_gather_async(block.data<float>(), out.data<float>(), static_cast<size_t>(block.numel()),
                                  DType::F32);
}


std::vector<double> DataParallel::gather(const std::vector<double>& mine, int64_t total) {
  if (!group_) return mine;
  STRATA_CHECK(static_cast<int64_t>(mine.size()) == share(total).count, "gathering {} values of a share of {}",
               mine.size(), share(total).count);
  // Shares differ by at most one: every rank sends the largest, padded.
  const size_t slot = static_cast<size_t>((total + degree() - 1) / degree());
  std::vector<double> padded(slot, 0.0), all(slot * static_cast<size_t>(degree()));
  std::copy(mine.begin(), mine.end(), padded.begin());
  group_->all_gather(padded.data(), all.data(), slot, DType::F64);
  std::vector<double> ordered;
  for (int r = 0; r < degree(); ++r) {
    const int64_t count = (r + 1) * total / degree() - r * total / degree();
    auto begin = all.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(r) * slot);
    ordered.insert(ordered.end(), begin, begin + count);
  }
  return ordered;
}

std::vector<double> DataParallel::sum(const std::vector<double>& mine) {
  if (!group_) return mine;
  std::vector<double> all(mine.size() * static_cast<size_t>(degree()));
  group_->all_gather(mine.data(), all.data(), mine.size(), DType::F64);
  std::vector<double> total(mine.size(), 0.0);
  for (size_t i = 0; i < all.size(); ++i) total[i % mine.size()] += all[i];
  return total;
}

void DataParallel::all_gather(const float* in, float* out, size_t count) {
  if (!group_) {
    std::memcpy(out, in, count * sizeof(float));
    return;
  }
  group_->all_gather(in, out, count, DType::F32);
}

void DataParallel::barrier() {
  if (group_) group_->barrier();
}

namespace {

void check_settings(const ParallelSettings& settings, const ModelConfig&) {
  check_non_negative("parallel.dp", settings.dp);
  check_positive("parallel.bucket_mb", settings.bucket_mb);
  if (settings.zero < 0 || settings.zero > 2) fail("key 'parallel.zero' must be 0, 1 or 2, got {}", settings.zero);
}

}  // namespace

ParallelDimension data_parallel_dimension() {
  return {.name = "dp",
          .nesting = 2,
          .runs_on_devices = true,
          .splits_batch = true,
          .takes_remaining_ranks = true,
          .keys = {settings_key<&DataParallelSettings::dp>("dp"),
                   settings_key<&DataParallelSettings::bucket_mb>("bucket_mb"),
                   settings_key<&DataParallelSettings::zero>("zero")},
          .check = check_settings};
}

}  // namespace strata
