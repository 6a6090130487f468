#pragma once
// How far a correct kernel's output may lie from the exact result (an f64 `ref` re-run of the same op on
// the same inputs): the bound `strata compare` judges each side against (truth.h). Three shapes of bound,
// one per kind of arithmetic, each with the terms --explain prints:
//   summation    y = sum of k products (matmul, linear, bmm, sum_to, embedding_backward, add): |y^ - y| <= u_out |y| + gamma_k(u_acc) * sum_i |a_i b_i|  (Higham, Thm 3.5: the
//                standard worst-case bound; the sum of magnitudes is the op re-run on |inputs|, exact for
//                these multilinear ops, so cancellation in y does not shrink the bound)
//   element-wise y = f(x) per element (gelu, swiglu, scale, cast, fused programs): 8 ulps (16) of the
//                larger of |y| and f re-run on |x| (what the formula's cancelling terms are worth)
//   row-wise     norms, softmax, attention, cross-entropy, rope and their backwards: reductions over a
//                row whose terms cancel (x - mean, dy - sum(dy p)): gamma_k(u_acc) times the row's largest
//                magnitude (of y and of the op on |inputs|), times a safety factor, plus c_low roundings
//                of intermediates in the dtype the kernel computes in (a bf16 attention rounds p to bf16)
// u_out is the unit roundoff of the side's stored dtype; u_acc that of the accumulator, f32 unless every
// float the kernel touches is f64 (every backend here accumulates bf16 and f16 in f32: a narrower
// accumulator is judged a fault). The table lives here rather than on the op schema because it
// describes how kernels may round (a fact of the backends) as compare measures it, not the op's meaning.
#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "ops/schema.h"

namespace strata {

enum class BoundShape { Summation, Elementwise, RowWise };

struct OpBoundModel {
  BoundShape shape = BoundShape::Summation;
  double ulps = 0;        // element-wise: roundings of the formula; row-wise: the safety factor
  double low_roundings = 0;  // row-wise: intermediates rounded to the compute dtype per term
};

// The model for an op type, or nullptr when none is known (the tensor is left unjudged; a parameter's
// whole gradient, a sum in f64 of its parts, is judged by its parts instead).
const OpBoundModel* op_bound_model(const std::string& op);

// The terms of one op's bound on one side, for the verdict and for --explain.
struct BoundTerms {
  BoundShape shape = BoundShape::Summation;
  int64_t reduction = 0;   // k
  double u_out = 0, u_acc = 0, u_low = 0;
  double ulps = 0, low_roundings = 0;
  double gamma = 0;        // gamma_k(u_acc) = k u_acc / (1 - k u_acc)
  double floor = 0;        // absolute: the smallest normal of the stored dtype (kernels may flush subnormals)
  std::string formula() const;  // "u_out|y| + gamma_768(u_acc) sum|a_i b_i|", with the figures
};

// `inputs` as the side's kernel read them, `output` the side's stored dtype, `factor` what its values
// were multiplied by (the floor scales with it).
BoundTerms bound_terms(const std::string& op, const OpBoundModel& model, const Metas& inputs, const Attrs& attrs,
                       int output, DType stored, double factor);

// Per element (f64, truth's shape): the allowed |side - truth| given the truth and the op re-run on the
// inputs' magnitudes.
Tensor element_bounds(const BoundTerms& terms, const Tensor& truth, const Tensor& magnitudes);

}  // namespace strata
