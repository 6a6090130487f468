#include "parallel/data_parallel.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "parallel/tensor_parallel_group.h"

namespace strata {

namespace {

// FNV-1a over the running executable: ranks must run the same build.
uint64_t executable_hash() {
  std::ifstream in("/proc/self/exe", std::ios::binary);
  uint64_t hash = 14695981039346656037ull;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
    for (std::streamsize i = 0; i < in.gcount(); ++i) {
      hash = (hash ^ static_cast<unsigned char>(buffer[i])) * 1099511628211ull;
    }
  }
  return hash;
}

// The dotted key of the first line where two TOML texts written by to_toml
// differ ("[section]" headers, then "key = value" lines), or "" if none.
std::string first_differing_key(const std::string& mine, const std::string& reference) {
  std::istringstream a(mine), b(reference);
  std::string line_a, line_b, section;
  while (true) {
    bool more_a = static_cast<bool>(std::getline(a, line_a));
    bool more_b = static_cast<bool>(std::getline(b, line_b));
    if (!more_a && !more_b) return "";
    if (!more_a) line_a.clear();
    if (!more_b) line_b.clear();
    const std::string& line = line_a.empty() ? line_b : line_a;
    if (!line.empty() && line.front() == '[') section = line.substr(1, line.find(']') - 1);
    if (line_a != line_b) {
      std::string key = line.substr(0, line.find(" ="));
      return line.front() == '[' ? section : section + "." + key;
    }
  }
}

// The root's text on every rank.
std::string broadcast_text(comm::Communicator& group, const std::string& text, int root) {
  int64_t length = static_cast<int64_t>(text.size());
  group.broadcast(&length, 1, DType::I64, root);
  std::vector<int32_t> packed(static_cast<size_t>((length + 3) / 4), 0);
  if (group.rank() == root) std::memcpy(packed.data(), text.data(), text.size());
  group.broadcast(packed.data(), packed.size(), DType::I32, root);
  return std::string(reinterpret_cast<const char*>(packed.data()), static_cast<size_t>(length));
}

}  // namespace

DataParallel::DataParallel(comm::Communicator group, comm::Communicator world)
    : group_(std::move(group)), world_(std::move(world)) {}

DataParallel DataParallel::of(DeviceMesh* mesh) {
  return mesh ? DataParallel(mesh->group(data_parallel_dimension().name), mesh->world()) : DataParallel();
}

int DataParallel::ranks_on_this_host() const {
  if (!world_) return 1;
  int here = world_->node_of(world_->rank());
  int count = 0;
  for (int rank = 0; rank < world_->size(); ++rank) count += world_->node_of(rank) == here ? 1 : 0;
  return count;
}

int DataParallel::agree_on_stop(int signal) { return static_cast<int>(over_world(signal, comm::ReduceOp::Max)); }

bool DataParallel::all_succeeded(bool mine) { return over_world(mine ? 0.0 : 1.0, comm::ReduceOp::Max) == 0; }

double DataParallel::over_world(double mine, comm::ReduceOp op) {
  if (!world_) return mine;
  float value = static_cast<float>(mine), combined = 0;
  world_->all_reduce(&value, &combined, 1, DType::F32, op);
  return combined;
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

ExactSquareSum DataParallel::sum(const ExactSquareSum& mine) { return group_ ? exact_sum_over(*group_, mine) : mine; }

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

void DataParallel::check_ranks_agree(const std::string& resolved_config) {
  if (!world_) return;
  comm::Communicator& group = *world_;
  std::string differing_key = first_differing_key(resolved_config, broadcast_text(group, resolved_config, 0));
  uint64_t binary = executable_hash();
  uint64_t reference_binary = binary;
  group.broadcast(&reference_binary, 1, DType::I64, 0);
  // 0: agrees with rank 0; 1: another config; 2: another binary.
  int32_t verdict = !differing_key.empty() ? 1 : binary != reference_binary ? 2 : 0;
  std::vector<int32_t> verdicts(static_cast<size_t>(group.size()));
  group.all_gather(&verdict, verdicts.data(), 1, DType::I32);
  auto first = std::find_if(verdicts.begin(), verdicts.end(), [](int32_t v) { return v != 0; });
  if (first == verdicts.end()) return;
  // Every rank names the same culprit, whichever rank's message the launcher shows.
  const int culprit = static_cast<int>(first - verdicts.begin());
  if (*first == 2) fail("rank {} runs a different strata binary than rank 0 (every rank must run the same build)", culprit);
  fail("rank {} was started with a config that differs from rank 0's, first at key '{}' (every rank must run the "
       "same resolved config)",
       culprit, broadcast_text(group, differing_key, culprit));
}

ParallelDimension data_parallel_dimension() { return {.name = "dp", .nesting = 1, .runs_on_devices = true}; }

}  // namespace strata
