#include "core/error.h"
#include "parallel/tensor_parallel.h"

namespace strata {

ParameterShard::ParameterShard(const std::string& name, const Shape& full, const ShardRule& rule,
                               const TensorParallelRank& tp)
    : name_(name), full_(full), shape_(full), style_(rule.style), parts_(rule.fused_parts), degree_(tp.degree),
      rank_(tp.rank), group_(tp.group) {
  if (!split()) return;
  if (full.empty()) fail("parameter '{}' is a scalar: a {} split needs a dim", name, shard_style_name(style_));
  // The output features are the last dim of [in, out] weights and 1-D biases, the first of [out, in].
  const size_t output_dim = rule.layout == WeightLayout::OutIn ? 0 : full.size() - 1;
  const size_t input_dim = rule.layout == WeightLayout::OutIn ? full.size() - 1 : 0;
  dim_ = style_ == ShardStyle::ColumnParallel ? output_dim : style_ == ShardStyle::RowParallel ? input_dim : 0;
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

ValueLayout ParameterShard::layout() const {
  ValueLayout layout;
  layout.shape = shape_;
  if (split()) {
    layout.kind = ValueLayout::Kind::Split;
    layout.group = group_;
    layout.dim = static_cast<int64_t>(dim_);
    layout.parts = parts_;
  }
  return layout;
}

std::vector<ParameterShard::Box> ParameterShard::boxes() const {
  if (!split()) return {{whole_box(full_), std::vector<int64_t>(full_.size(), 0)}};
  const int64_t part = full_[dim_] / parts_, piece = shape_[dim_] / parts_;
  std::vector<Box> boxes;
  for (int64_t p = 0; p < parts_; ++p) {
    Box box{whole_box(full_), std::vector<int64_t>(full_.size(), 0)};
    box.full.offsets[dim_] = p * part + rank_ * part / degree_;
    box.full.lengths[dim_] = piece;
    box.shard_offsets[dim_] = p * piece;
    boxes.push_back(std::move(box));
  }
  return boxes;
}

void ParameterShard::slice(const Tensor& full, Tensor& shard) const {
  STRATA_CHECK(full.shape() == full_ && shard.shape() == shape_ && full.dtype() == shard.dtype() &&
                   full.is_contiguous() && shard.is_contiguous(),
               "parameter '{}': shard {} of {} copied with tensors {} and {}", name_, shape_str(shape_),
               shape_str(full_), shape_str(full.shape()), shape_str(shard.shape()));
  for (const Box& box : boxes()) copy_box(full, box.full.offsets, shard, box.shard_offsets, box.full.lengths);
}

std::vector<ParameterShard> parameter_shards(const std::vector<ParamSpec>& specs, const ShardingPlan& plan,
                                             const TensorParallelRank& tp) {
  std::vector<ParameterShard> shards;
  for (const ParamSpec& spec : specs) shards.emplace_back(spec.name, spec.shape, plan.rule_for(spec.name), tp);
  return shards;
}

}  // namespace strata
