#include "planner/fp8_linears.h"

#include <set>

#include "core/error.h"
#include "planner/expert_work.h"

namespace strata {

namespace {

constexpr double kFp8 = 1;  // bytes of a float8 element (E4M3 or E5M2)

bool is_fp8_linear(const OpWork& op) { return op.kind == OpKind::Gemm && !is_expert_gemm(op); }

double elements(const GemmShape& s, int64_t rows, int64_t columns) {
  return static_cast<double>(s.batch) * static_cast<double>(rows) * static_cast<double>(columns);
}

OpWork cast(const std::string& label, double bytes, bool selective_recompute) {
  OpWork op{"fp8_cast", label, OpKind::Other, 0, bytes};
  op.selective_recompute = selective_recompute;
  return op;
}

// The weight's cast per forward: none under delayed scaling (made once per step); a transpose of the gathered fp8
// weight when it arrives cast; else a cast as any tensor's.
double weight_cast_bytes(Fp8Recipe recipe, double width, bool gathered_in_fp8) {
  if (recipe == Fp8Recipe::Delayed) return 0;
  return gathered_in_fp8 ? 2 * kFp8 : fp8_cast_bytes(recipe, width);
}

}  // namespace

Fp8Recipe parse_fp8_recipe(const std::string& text, const std::string& what) {
  if (text == "none") return Fp8Recipe::None;
  if (text == "delayed") return Fp8Recipe::Delayed;
  if (text == "tensorwise") return Fp8Recipe::Tensorwise;
  fail("{} must be none, delayed or tensorwise, got '{}'", what, text);
}

const char* fp8_recipe_name(Fp8Recipe recipe) {
  switch (recipe) {
    case Fp8Recipe::None: return "none";
    case Fp8Recipe::Delayed: return "delayed";
    case Fp8Recipe::Tensorwise: return "tensorwise";
  }
  return "?";
}

double fp8_cast_bytes(Fp8Recipe recipe, double width) {
  const double cast_transpose = width + 2 * kFp8;  // read once, write the fp8 copy and its transpose
  switch (recipe) {
    case Fp8Recipe::None: return 0;
    case Fp8Recipe::Delayed: return cast_transpose;
    case Fp8Recipe::Tensorwise: return width + cast_transpose;  // the amax reduction reads it first
  }
  return 0;
}

void add_fp8_linears(SegmentWork& layer, Fp8Recipe recipe, DType dtype, bool weights_gathered_in_fp8) {
  if (recipe == Fp8Recipe::None) return;
  const double width = static_cast<double>(dtype_size(dtype));
  const double per_element = fp8_cast_bytes(recipe, width);
  const double per_weight = weight_cast_bytes(recipe, width, weights_gathered_in_fp8);
  std::set<int> inputs_cast;
  std::vector<OpWork> forward_casts, backward_casts;
  for (OpWork& op : layer.forward) {
    if (!is_fp8_linear(op)) continue;
    const GemmShape& s = op.gemm;
    if (op.gemm_input < 0 || inputs_cast.insert(op.gemm_input).second) {
      forward_casts.push_back(cast(op.label + ".fp8_input", elements(s, s.m, s.k) * per_element,
                                   op.selective_recompute));
    }
    if (per_weight > 0) {
      forward_casts.push_back(cast(op.label + ".fp8_weight", elements(s, s.k, s.n) * per_weight,
                                   op.selective_recompute));
    }
    backward_casts.push_back(cast(op.label + ".fp8_grad_output", elements(s, s.m, s.n) * per_element, false));
  }
  for (std::vector<OpWork>* ops : {&layer.forward, &layer.backward}) {
    for (OpWork& op : *ops) {
      if (!is_fp8_linear(op)) continue;
      const GemmShape& s = op.gemm;
      op.fp8 = true;
      op.bytes = (elements(s, s.m, s.k) + elements(s, s.k, s.n)) * kFp8 + elements(s, s.m, s.n) * width;
    }
  }
  layer.forward.insert(layer.forward.end(), forward_casts.begin(), forward_casts.end());
  layer.backward.insert(layer.backward.end(), backward_casts.begin(), backward_casts.end());
}

double fp8_weight_elements(const SegmentWork& layer) {
  double total = 0;
  for (const OpWork& op : layer.forward) {
    if (op.fp8) total += elements(op.gemm, op.gemm.k, op.gemm.n);
  }
  return total;
}

double fp8_gather_width(double params, double fp8_weights, double width) {
  if (params <= 0) return width;
  STRATA_CHECK(fp8_weights <= params, "more float8 weights ({}) than parameters ({})", fp8_weights, params);
  return (fp8_weights * kFp8 + (params - fp8_weights) * width) / params;
}

}  // namespace strata
