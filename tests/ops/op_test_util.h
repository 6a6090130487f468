#pragma once
// Helpers shared by the op tests: building small tensors, running ops on the
// `ref` backend, and central finite differences.
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "backends/backends.h"

namespace strata {
// Names dtypes in GoogleTest messages ("f32" instead of a byte dump).
inline void PrintTo(DType dtype, std::ostream* out) { *out << dtype_name(dtype); }
}  // namespace strata

namespace strata::testing {

Tensor make_tensor(const Shape& shape, const std::vector<double>& values, DType dtype = DType::F64);
Tensor make_indices(const Shape& shape, const std::vector<int64_t>& values, DType dtype = DType::I64);
// Standard normal entries times `scale`, a pure function of `seed`.
Tensor random_tensor(const Shape& shape, uint64_t seed, double scale = 1.0, DType dtype = DType::F64);
Tensor f64(const Shape& shape);  // zeros: the inputs of the shape-error tests
std::vector<double> values_of(const Tensor& tensor);

// A dispatcher on `ref` that refuses any fallback, shared by the tests.
Dispatcher& ref_dispatcher();
// Runs an op on `ref` and returns its freshly allocated outputs.
Tensors run_ref(const std::string& op, const Tensors& inputs, const Attrs& attrs = {});

double dot(const Tensor& a, const Tensor& b);        // sum of a * b, both floating
Tensor offset(const Tensor& x, double step, const Tensor& direction);  // x + step * direction, f64

// Derivative of `loss` at `x` along `direction`, by central differences.
double central_difference(const std::function<double(const Tensor&)>& loss, const Tensor& x,
                          const Tensor& direction, double step = 1e-5);

// For L(x) = sum(dy * forward(x)): <gradient, d> must match the central
// difference of L along random directions d (f64 on ref).
void expect_gradient(const std::function<Tensor(const Tensor&)>& forward, const Tensor& x, const Tensor& dy,
                     const Tensor& gradient, const std::string& what);

// Fails the test unless `action` throws a strata::Error whose message
// contains every one of `parts`.
void expect_error(const std::function<void()>& action, const std::vector<std::string>& parts);

// Every element of `actual` within atol + rtol * |expected| of `expected`.
void expect_all_near(const Tensor& actual, const std::vector<double>& expected, double atol, double rtol,
                     const std::string& what);

}  // namespace strata::testing
