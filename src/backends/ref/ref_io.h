#pragma once
// Shared plumbing of the ref kernels. Every kernel reads its inputs whole into
// doubles, computes in double and rounds each output element once on store:
// results do not depend on the element type beyond that one rounding, and an
// output that aliases an input (add, scale, adamw) is safe because all reads
// happen before any write.
#include <string>
#include <vector>

#include "ops/backend.h"

namespace strata::ref {

std::vector<double> load(const Tensor& tensor);                    // any floating dtype
void store(const Tensor& tensor, const std::vector<double>& values);  // rounds to the tensor's dtype
std::vector<int64_t> load_indices(const Tensor& tensor);           // i32 or i64
// `value` rounded to `dtype` as store() rounds it (bf16 and f16 through f32),
// for values an unfused op would store and the next one read back.
double round_to(DType dtype, double value);

// Fails (naming the op, the input, the value and its position) unless every
// index lies in [0, bound).
void check_indices(const std::string& op, const std::string& input, const Tensor& tensor,
                   const std::vector<int64_t>& indices, int64_t bound);

// Registers `kernel` for `op` under f64, f32, bf16 and f16.
void add_float_kernels(Backend& backend, const std::string& op, const KernelFn& kernel);

}  // namespace strata::ref
