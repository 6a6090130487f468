#include "planner/fsdp_copies.h"

#include "core/error.h"

namespace strata {

namespace {

constexpr double kF32 = 4.0;

OpWork copy(const std::string& label, double bytes) { return {"copy", label, OpKind::Other, 0, bytes}; }

}  // namespace

FsdpRuntime parse_fsdp_runtime(const std::string& text, const std::string& what) {
  if (text == "none") return FsdpRuntime::None;
  if (text == "1") return FsdpRuntime::Fsdp1;
  if (text == "2") return FsdpRuntime::Fsdp2;
  fail("{} must be none, 1 or 2, got '{}'", what, text);
}

FsdpUnitCopies fsdp_unit_copies(FsdpRuntime runtime, double params, int shards, DType param_dtype, DType reduce_dtype,
                                double gather_width) {
  FsdpUnitCopies copies;
  if (runtime == FsdpRuntime::None || shards < 2 || params <= 0) return copies;
  const double width = static_cast<double>(dtype_size(param_dtype));
  const double gathered = gather_width > 0 ? gather_width : width;
  const double reduce = static_cast<double>(dtype_size(reduce_dtype));
  const bool mixed = param_dtype != DType::F32;
  const double shard = params / shards;
  if (mixed) copies.per_gather.push_back(copy("fsdp.shard_cast", shard * (kF32 + gathered)));
  if (runtime == FsdpRuntime::Fsdp1) {
    copies.per_backward.push_back(copy("fsdp.split_backward_cat", params * 2 * width));
    if (reduce_dtype != param_dtype) copies.per_backward.push_back(copy("fsdp.grad_cast", params * (width + reduce)));
    copies.per_backward.push_back(copy("fsdp.predivide", params * 2 * reduce));
    copies.per_backward.push_back(copy("fsdp.postdivide", shard * 2 * reduce));
    // The reduced shard cast to the fp32 shard's dtype for the optimizer.
    if (reduce_dtype != DType::F32) {
      copies.per_backward.push_back(copy("fsdp.shard_grad_cast", shard * (reduce + kF32)));
    }
  } else {
    copies.per_gather.push_back(copy("fsdp.all_gather_copy_in", shard * 2 * gathered));
    copies.per_gather.push_back(copy("fsdp.all_gather_copy_out", params * 2 * gathered));
    copies.per_backward.push_back(copy("fsdp.reduce_scatter_copy_in", params * (width + reduce)));
  }
  return copies;
}

}  // namespace strata
