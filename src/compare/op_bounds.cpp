#include "compare/op_bounds.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include <fmt/format.h>


namespace strata {

namespace {

// Safety factors: row-wise bounds take the row's largest magnitude, which already over-counts; the factor
// 2 covers the two passes (statistics, then the normalised values) of a norm or softmax. Element-wise
// formulas chain a few libm or vectorised calls (the cpu backend's gelu_backward is measured at 3.6 ulps
// of f32 on the default model), hence 8, twice that (16 for a fused program of up to four instructions);
// a perturbation of 1e-3 is still 10^4 ulps.
const std::map<std::string, OpBoundModel>& models() {
  static const std::map<std::string, OpBoundModel> table = [] {
    std::map<std::string, OpBoundModel> t;
    const OpBoundModel summation{BoundShape::Summation};
    for (const char* op : {"matmul", "linear", "bmm", "sum_to", "embedding", "embedding_backward", "add",
                           "split_heads", "merge_heads"}) {
      t[op] = summation;
    }
    for (const char* op : {"gelu", "gelu_backward", "swiglu", "swiglu_backward", "scale", "cast"}) {
      t[op] = {BoundShape::Elementwise, 8};
    }
    for (const char* op : {"fused_elementwise1", "fused_elementwise2", "fused_elementwise3", "fused_elementwise4"}) {
      t[op] = {BoundShape::Elementwise, 16};
    }
    for (const char* op : {"layernorm", "layernorm_backward", "add_layernorm", "layernorm_backward_add", "rms_norm",
                           "rms_norm_backward", "add_rms_norm", "rms_norm_backward_add"}) {
      t[op] = {BoundShape::RowWise, 2, 2};
    }
    for (const char* op : {"causal_softmax", "causal_softmax_backward", "cross_entropy", "cross_entropy_backward", "rope"}) {
      t[op] = {BoundShape::RowWise, 2, 1};
    }
    for (const char* op : {"attention", "attention_backward", "grouped_attention", "grouped_attention_backward"}) {
      t[op] = {BoundShape::RowWise, 2, 3};
    }
    return t;
  }();
  return table;
}

double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::F64: return std::ldexp(1.0, -53);
    case DType::BF16: return std::ldexp(1.0, -8);
    case DType::F16: return std::ldexp(1.0, -11);
    default: return std::ldexp(1.0, -24);
  }
}

double smallest_normal(DType dtype) {
  switch (dtype) {
    case DType::F64: return std::numeric_limits<double>::min();
    case DType::F16: return std::ldexp(1.0, -14);
    default: return std::numeric_limits<float>::min();  // f32, and bf16's exponent range is f32's
  }
}

bool is_backward(const std::string& op) { return op.find("_backward") != std::string::npos; }

int64_t rows_of(const TensorMeta& meta) {
  const int64_t last = meta.shape.empty() ? 1 : meta.shape.back();
  return last == 0 ? 0 : shape_numel(meta.shape) / last;
}

// k: how many terms one output element sums (or, for a row-wise op, the longest reduction it makes).
int64_t reduction_length(const std::string& op, BoundShape shape, const Metas& inputs, const Attrs& attrs, int output) {
  if (shape == BoundShape::Elementwise || inputs.empty()) return 0;
  const OpRegistry& registry = OpRegistry::global();
  const Metas outputs = registry.infer(op, inputs, attrs);
  const int64_t out_numel = std::max<int64_t>(shape_numel(outputs.at(static_cast<size_t>(output)).shape), 1);
  if (shape == BoundShape::Summation) {
    if (registry.get(op).kind == OpKind::Gemm) {
      return static_cast<int64_t>(registry.cost(op, inputs, attrs).flops / (2.0 * static_cast<double>(out_numel)));
    }
    if (op == "embedding_backward") return shape_numel(inputs[1].shape);  // every position may read one row
    int64_t largest = 0;
    for (const TensorMeta& meta : inputs) largest = std::max(largest, shape_numel(meta.shape));
    return std::max<int64_t>(largest / out_numel - 1, 0) + (op == "add" ? 1 : 0);
  }
  if (op.find("attention") != std::string::npos) {
    // Scores over T keys of D-long dot products; backward, dk and dv sum over every query of the head group.
    // The queries: q (grouped), or the packed qkv; the backward's first input is dout.
    const TensorMeta& q = inputs[is_backward(op) ? 1 : 0];
    const int64_t heads = attrs.get_int("n_head"), seq = q.shape.size() > 1 ? q.shape[1] : 1;
    const int64_t head_dim = q.shape.back() / (op.rfind("grouped", 0) == 0 ? 1 : 3) / heads;
    return seq + head_dim + (is_backward(op) ? seq * heads : 0);
  }
  const TensorMeta& x = inputs[0];
  const int64_t last = x.shape.empty() ? 1 : x.shape.back();
  if (op.rfind("cross_entropy", 0) == 0) return last + rows_of(x);  // log-sum-exp over V, the mean over rows
  if (op == "rope") return 2;
  return is_backward(op) ? std::max(last, rows_of(x)) : last;  // a norm's weight gradient sums over rows
}

}  // namespace

const OpBoundModel* op_bound_model(const std::string& op) {
  auto found = models().find(op);
  return found == models().end() ? nullptr : &found->second;
}

std::string BoundTerms::formula() const {
  switch (shape) {
    case BoundShape::Summation:
      return fmt::format("summation: u_out|y| + gamma_{}(u_acc) sum|terms|, u_out = {:.3g}, u_acc = {:.3g}, gamma = {:.3g}",
                         reduction, u_out, u_acc, gamma);
    case BoundShape::Elementwise:
      return fmt::format("element-wise: u_out|y| + {} ulps(u_acc) max(|y|, |f(|x|)|), u_out = {:.3g}, u_acc = {:.3g}",
                         ulps, u_out, u_acc);
    case BoundShape::RowWise:
      return fmt::format("row-wise: u_out|y| + ({} u_low + {} gamma_{}(u_acc)) rowmax(|y|, |f(|x|)|), u_out = {:.3g}, "
                         "u_low = {:.3g}, u_acc = {:.3g}, gamma = {:.3g}",
                         low_roundings, ulps, reduction, u_out, u_low, u_acc, gamma);
  }
  return "?";
}

BoundTerms bound_terms(const std::string& op, const OpBoundModel& model, const Metas& inputs, const Attrs& attrs,
                       int output, DType stored, double factor) {
  BoundTerms terms{.shape = model.shape, .ulps = model.ulps, .low_roundings = model.low_roundings};
  terms.reduction = reduction_length(op, model.shape, inputs, attrs, output);
  DType narrowest = stored;
  bool all_f64 = stored == DType::F64;
  for (const TensorMeta& meta : inputs) {
    if (!is_floating(meta.dtype)) continue;
    all_f64 = all_f64 && meta.dtype == DType::F64;
    if (unit_roundoff(meta.dtype) > unit_roundoff(narrowest)) narrowest = meta.dtype;
  }
  terms.u_out = unit_roundoff(stored);
  terms.u_low = unit_roundoff(narrowest);
  terms.u_acc = unit_roundoff(all_f64 ? DType::F64 : DType::F32);
  const double k_u = static_cast<double>(terms.reduction) * terms.u_acc;
  terms.gamma = k_u < 1 ? k_u / (1 - k_u) : INFINITY;
  terms.floor = smallest_normal(stored) * std::abs(factor);
  return terms;
}

Tensor element_bounds(const BoundTerms& terms, const Tensor& truth, const Tensor& magnitudes) {
  Tensor bounds = Tensor::empty(truth.shape(), DType::F64);
  const double* y = truth.data<double>();
  const double* m = magnitudes.data<double>();
  double* b = bounds.data<double>();
  const int64_t n = truth.numel();
  auto larger = [&](int64_t i) { return std::max(std::abs(y[i]), std::abs(m[i])); };
  if (terms.shape == BoundShape::RowWise) {
    const int64_t row = truth.dim() == 0 ? 1 : std::max<int64_t>(truth.size(-1), 1);
    const double per_row = terms.low_roundings * terms.u_low + terms.ulps * terms.gamma;
    for (int64_t start = 0; start < n; start += row) {
      double largest = 0;
      for (int64_t i = start; i < start + row; ++i) largest = std::max(largest, larger(i));
      for (int64_t i = start; i < start + row; ++i) b[i] = terms.u_out * std::abs(y[i]) + per_row * largest + terms.floor;
    }
    return bounds;
  }
  for (int64_t i = 0; i < n; ++i) {
    const double spread = terms.shape == BoundShape::Summation ? terms.gamma * std::abs(m[i])
                                                               : terms.ulps * terms.u_acc * larger(i);
    b[i] = terms.u_out * std::abs(y[i]) + spread + terms.floor;
  }
  return bounds;
}

}  // namespace strata
