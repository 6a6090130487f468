#include <cstring>

#include "core/error.h"
#include "parallel/tensor_parallel.h"

namespace strata {

ParameterShard::ParameterShard(const std::string& name, const Shape& full, const ShardRule& rule,
                               const TensorParallelRank& tp)
    : name_(name), full_(full), shape_(full), style_(rule.style), parts_(rule.fused_parts), degree_(tp.degree),
      rank_(tp.rank) {
  if (!split()) return;
  if (full.empty()) fail("parameter '{}' is a scalar: a {} split needs a dim", name, shard_style_name(style_));
  dim_ = style_ == ShardStyle::ColumnParallel ? full.size() - 1 : 0;
  const int64_t length = full[dim_];
  if (parts_ < 1 || length % parts_ != 0) {
    fail("parameter '{}' {} does not split into {} fused parts along dim {}", name, shape_str(full), parts_, dim_);
  }
  const int64_t part = length / parts_;
  if (style_ != ShardStyle::VocabParallel && part % degree_ != 0) {
    fail("parameter '{}' {} is {}-parallel with parts of {} along dim {}, which parallel.tp = {} does not divide",
         name, shape_str(full), shard_style_name(style_), part, dim_, degree_);
  }
  if (part < degree_) {
    fail("parameter '{}' {} has {} rows to split but parallel.tp is {}", name, shape_str(full), part, degree_);
  }
  shape_[dim_] = parts_ * ((rank_ + 1) * part / degree_ - rank_ * part / degree_);
}

int64_t ParameterShard::first_row() const {
  STRATA_CHECK(style_ == ShardStyle::VocabParallel, "first_row of a {} parameter", shard_style_name(style_));
  return split() ? rank_ * full_[0] / degree_ : 0;
}

ParameterShard ParameterShard::of_rank(int rank) const {
  return ParameterShard(name_, full_, {name_, style_, parts_}, {degree_, rank, ""});
}

void ParameterShard::slice(const Tensor& full, Tensor& shard) const { copy(full, shard, /*into_shard=*/true); }

void ParameterShard::place(const Tensor& shard, Tensor& full) const {
  copy(shard, full, /*into_shard=*/false);
}

void ParameterShard::copy(const Tensor& from, Tensor& to, bool into_shard) const {
  const Tensor& whole = into_shard ? from : to;
  const Tensor& part_tensor = into_shard ? to : from;
  STRATA_CHECK(whole.shape() == full_ && part_tensor.shape() == shape_ && from.dtype() == to.dtype() &&
                   from.is_contiguous() && to.is_contiguous(),
               "parameter '{}': shard {} of {} copied with tensors {} and {}", name_, shape_str(shape_),
               shape_str(full_), shape_str(from.shape()), shape_str(to.shape()));
  if (!split()) {
    std::memcpy(to.raw(), from.raw(), from.nbytes());
    return;
  }
  size_t outer = 1, inner = dtype_size(from.dtype());
  for (size_t axis = 0; axis < full_.size(); ++axis) {
    if (axis < dim_) outer *= static_cast<size_t>(full_[axis]);
    if (axis > dim_) inner *= static_cast<size_t>(full_[axis]);
  }
  const size_t length = static_cast<size_t>(full_[dim_]), part = length / static_cast<size_t>(parts_);
  const size_t begin = static_cast<size_t>(rank_) * part / static_cast<size_t>(degree_);
  const size_t piece = static_cast<size_t>(shape_[dim_]) / static_cast<size_t>(parts_);
  auto* whole_bytes = static_cast<char*>(whole.raw());
  auto* shard_bytes = static_cast<char*>(part_tensor.raw());
  for (size_t o = 0; o < outer; ++o) {
    for (size_t p = 0; p < static_cast<size_t>(parts_); ++p) {
      char* at_whole = whole_bytes + (o * length + p * part + begin) * inner;
      char* at_shard = shard_bytes + (o * static_cast<size_t>(shape_[dim_]) + p * piece) * inner;
      std::memcpy(into_shard ? at_shard : at_whole, into_shard ? at_whole : at_shard, piece * inner);
    }
  }
}

std::vector<ParameterShard> parameter_shards(const std::vector<ParamSpec>& specs, const ShardingPlan& plan,
                                             const TensorParallelRank& tp) {
  std::vector<ParameterShard> shards;
  for (const ParamSpec& spec : specs) shards.emplace_back(spec.name, spec.shape, plan.rule_for(spec.name), tp);
  return shards;
}

std::vector<ParamSpec> shard_specs(std::vector<ParamSpec> specs, const std::vector<ParameterShard>& shards) {
  STRATA_CHECK(specs.size() == shards.size(), "{} parameter specs for {} shards", specs.size(), shards.size());
  for (size_t i = 0; i < specs.size(); ++i) specs[i].shape = shards[i].shape();
  return specs;
}

}  // namespace strata
