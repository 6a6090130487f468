#pragma once
// Helpers for the cpu-vs-ref tests: random f32 inputs, running an op on a
// backend (no fallbacks allowed), and comparisons.
#include <functional>
#include <string>
#include <vector>

#include "backends/backends.h"

namespace strata::testing {

// Standard normal entries times `scale`, a pure function of `seed`.
Tensor random_f32(const Shape& shape, uint64_t seed, float scale = 1.0f);
// Uniform integers in [0, bound), stored as `dtype` (i32 or i64).
Tensor random_indices(const Shape& shape, uint64_t seed, int64_t bound, DType dtype = DType::I64);

// A dispatcher on backend `name` that refuses fallbacks, so a missing native
// kernel fails the test; run_on runs one op on it with fresh outputs, moving
// host inputs to the backend's device and the outputs back.
Dispatcher& dispatcher(const std::string& name);
Tensors run_on(const std::string& name, const std::string& op, const Tensors& inputs, const Attrs& attrs = {});

// f32 results are compared with the ref backend (f64 arithmetic, one final
// rounding) by a relative error scaled to the output's size:
//   |actual - expected| <= tol * (|expected| + rms(expected)),
// so elements that cancel to near zero are judged against the typical
// magnitude instead of themselves.
void expect_close(const Tensor& actual, const Tensor& expected, double tol, const std::string& what);

// Bit-identical contents (determinism checks).
void expect_identical(const Tensor& first, const Tensor& second, const std::string& what);

// cpu add(a, b) and scale(a, factor) written over a copy of `a` give the bits
// of the out-of-place runs; `what` names the case.
void expect_add_and_scale_in_place(const Tensor& a, const Tensor& b, double factor, const std::string& what);

// Runs `op` on cpu and ref, compares every output with tolerance `tol`, then
// runs cpu again and requires the same bits. Returns the cpu outputs.
Tensors check_against_ref(const std::string& op, const Tensors& inputs, const Attrs& attrs, double tol,
                          const std::string& what);
// The same for any backend (opencl: on its first device).
Tensors check_backend_against_ref(const std::string& backend, const std::string& op, const Tensors& inputs,
                                  const Attrs& attrs, double tol, const std::string& what);
// The same under ops.sum_order = "permuted" (the same sums in another order), which must also move more than
// a tenth of the first output's bits from the natural order's.
void check_permuted_sums_against_ref(const std::string& backend, const std::string& op, const Tensors& inputs,
                                     const Attrs& attrs, double tol, const std::string& what);

// Runs `check` once per path of the bf16 attention kernels this CPU offers:
// AMX tiles where it has them, then the AVX-512 BF16 dot products (forced);
// `path` names the one running.
void for_each_bf16_attention_path(const std::function<void(const std::string& path)>& check);

}  // namespace strata::testing
