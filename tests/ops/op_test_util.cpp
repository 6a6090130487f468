#include "op_test_util.h"

#include <cmath>

#include <gtest/gtest.h>

#include "core/rng.h"

namespace strata::testing {

Tensor make_tensor(const Shape& shape, const std::vector<double>& values, DType dtype) {
  STRATA_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "{} values for shape {}", values.size(),
               shape_str(shape));
  Tensor tensor = Tensor::empty(shape, DType::F64);
  std::copy(values.begin(), values.end(), tensor.data<double>());
  return tensor.to(dtype);
}

Tensor make_indices(const Shape& shape, const std::vector<int64_t>& values, DType dtype) {
  STRATA_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape), "{} indices for shape {}", values.size(),
               shape_str(shape));
  Tensor tensor = Tensor::empty(shape, DType::I64);
  std::copy(values.begin(), values.end(), tensor.data<int64_t>());
  return tensor.to(dtype);
}

Tensor random_tensor(const Shape& shape, uint64_t seed, double scale, DType dtype) {
  CounterRng rng(seed);
  std::vector<double> values(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < values.size(); ++i) values[i] = scale * rng.normal(0, i);
  return make_tensor(shape, values, dtype);
}

Tensor f64(const Shape& shape) { return Tensor::zeros(shape, DType::F64); }

std::vector<double> values_of(const Tensor& tensor) {
  Tensor f64 = tensor.to(DType::F64);
  const double* data = f64.data<double>();
  return std::vector<double>(data, data + f64.numel());
}

Dispatcher& ref_dispatcher() {
  static std::unique_ptr<Dispatcher> dispatcher = make_dispatcher("ref", FallbackPolicy::Error);
  return *dispatcher;
}

Tensors run_ref(const std::string& op, const Tensors& inputs, const Attrs& attrs) {
  return ref_dispatcher().call(op, inputs, attrs);
}

double dot(const Tensor& a, const Tensor& b) {
  std::vector<double> x = values_of(a), y = values_of(b);
  STRATA_CHECK(x.size() == y.size(), "dot of {} and {} elements", x.size(), y.size());
  double sum = 0.0;
  for (size_t i = 0; i < x.size(); ++i) sum += x[i] * y[i];
  return sum;
}

Tensor offset(const Tensor& x, double step, const Tensor& direction) {
  std::vector<double> values = values_of(x), d = values_of(direction);
  for (size_t i = 0; i < values.size(); ++i) values[i] += step * d[i];
  return make_tensor(x.shape(), values);
}

double central_difference(const std::function<double(const Tensor&)>& loss, const Tensor& x,
                          const Tensor& direction, double step) {
  return (loss(offset(x, step, direction)) - loss(offset(x, -step, direction))) / (2.0 * step);
}

void expect_gradient(const std::function<Tensor(const Tensor&)>& forward, const Tensor& x, const Tensor& dy,
                     const Tensor& gradient, const std::string& what) {
  ASSERT_EQ(gradient.shape(), x.shape()) << what;
  auto loss = [&](const Tensor& point) { return dot(dy, forward(point)); };
  for (uint64_t seed : {101, 102, 103}) {
    Tensor direction = random_tensor(x.shape(), seed);
    double analytic = dot(gradient, direction);
    double numeric = central_difference(loss, x, direction);
    // Truncation (h^2 = 1e-10) and rounding (1e-16 / h) errors stay far below this.
    EXPECT_NEAR(analytic, numeric, 1e-7 * (1 + std::abs(numeric))) << what << ", direction seed " << seed;
  }
}

void expect_all_near(const Tensor& actual, const std::vector<double>& expected, double atol, double rtol,
                     const std::string& what) {
  std::vector<double> got = values_of(actual);
  ASSERT_EQ(got.size(), expected.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    bool close = std::abs(got[i] - expected[i]) <= atol + rtol * std::abs(expected[i]);
    if (!close && reported++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", expected " << expected[i];
    }
  }
}

void expect_error(const std::function<void()>& action, const std::vector<std::string>& parts) {
  try {
    action();
    ADD_FAILURE() << "no error; expected one mentioning " << parts.front();
  } catch (const Error& error) {
    std::string message = error.what();
    for (const std::string& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
  }
}

}  // namespace strata::testing
