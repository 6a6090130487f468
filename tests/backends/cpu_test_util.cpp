#include "cpu_test_util.h"

#include <cmath>
#include <cstring>
#include <map>
#include <memory>

#include <gtest/gtest.h>

#include "backends/cpu/amx_tiles.h"
#include "core/rng.h"
#include "ops/sum_order.h"

namespace strata::testing {

Tensor random_f32(const Shape& shape, uint64_t seed, float scale) {
  Tensor tensor = Tensor::empty(shape, DType::F32);
  fill_normal(tensor.data<float>(), tensor.numel(), CounterRng(seed), 0, 0.0f, scale);
  return tensor;
}

Tensor random_indices(const Shape& shape, uint64_t seed, int64_t bound, DType dtype) {
  CounterRng rng(seed);
  Tensor tensor = Tensor::empty(shape, DType::I64);
  int64_t* values = tensor.data<int64_t>();
  for (int64_t i = 0; i < tensor.numel(); ++i) {
    auto drawn = static_cast<int64_t>(rng.uniform(1, static_cast<uint64_t>(i)) * static_cast<float>(bound));
    values[i] = std::min(drawn, bound - 1);
  }
  return tensor.to(dtype);
}

Dispatcher& dispatcher(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Dispatcher>> dispatchers;
  auto& entry = dispatchers[name];
  if (!entry) entry = make_dispatcher(name, FallbackPolicy::Error);
  return *entry;
}

Tensors run_on(const std::string& name, const std::string& op, const Tensors& inputs, const Attrs& attrs) {
  Dispatcher& chosen = dispatcher(name);
  const Device& device = chosen.backend().device();
  Tensors on_device;
  for (const Tensor& input : inputs) on_device.push_back(input.to_device(device));
  Tensors outputs = chosen.call(op, on_device, attrs);
  for (Tensor& output : outputs) output = output.to_host();
  return outputs;
}

void expect_close(const Tensor& actual, const Tensor& expected, double tol, const std::string& what) {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  Tensor a = actual.to(DType::F64), e = expected.to(DType::F64);
  const double* x = a.data<double>();
  const double* y = e.data<double>();
  int64_t count = a.numel();
  double squares = 0.0;
  for (int64_t i = 0; i < count; ++i) squares += y[i] * y[i];
  double rms = count == 0 ? 0.0 : std::sqrt(squares / static_cast<double>(count));
  int64_t worst = -1;
  double worst_ratio = 0.0;
  for (int64_t i = 0; i < count; ++i) {
    double bound = tol * (std::fabs(y[i]) + rms);
    double error = std::fabs(x[i] - y[i]);
    double ratio = bound > 0 ? error / bound : (error > 0 ? INFINITY : 0.0);
    if (std::isnan(ratio)) ratio = INFINITY;
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  EXPECT_LE(worst_ratio, 1.0) << what << ": element " << worst << " is " << (worst >= 0 ? x[worst] : 0.0)
                              << ", expected " << (worst >= 0 ? y[worst] : 0.0) << " (tolerance " << tol
                              << " of |expected| + rms " << rms << ")";
}

void expect_identical(const Tensor& first, const Tensor& second, const std::string& what) {
  ASSERT_EQ(first.shape(), second.shape()) << what;
  ASSERT_EQ(first.dtype(), second.dtype()) << what;
  EXPECT_EQ(std::memcmp(first.raw(), second.raw(), first.nbytes()), 0) << what << ": two runs differ";
}

Tensors check_against_ref(const std::string& op, const Tensors& inputs, const Attrs& attrs, double tol,
                          const std::string& what) {
  return check_backend_against_ref("cpu", op, inputs, attrs, tol, what);
}

Tensors check_backend_against_ref(const std::string& backend, const std::string& op, const Tensors& inputs,
                                  const Attrs& attrs, double tol, const std::string& what) {
  Tensors cpu = run_on(backend, op, inputs, attrs);
  Tensors ref = run_on("ref", op, inputs, attrs);
  Tensors again = run_on(backend, op, inputs, attrs);
  for (size_t i = 0; i < cpu.size(); ++i) {
    std::string label = what + " output " + std::to_string(i);
    expect_close(cpu[i], ref[i], tol, label);
    expect_identical(cpu[i], again[i], label);
  }
  return cpu;
}

void check_permuted_sums_against_ref(const std::string& backend, const std::string& op, const Tensors& inputs,
                                     const Attrs& attrs, double tol, const std::string& what) {
  const Tensor natural = run_on(backend, op, inputs, attrs)[0];
  set_sum_order(SumOrder::Permuted);
  const Tensor permuted = check_backend_against_ref(backend, op, inputs, attrs, tol, what + ", permuted sums")[0];
  set_sum_order(SumOrder::Natural);
  int64_t moved = 0;
  for (int64_t i = 0; i < natural.numel(); ++i) moved += natural.data<float>()[i] != permuted.data<float>()[i];
  EXPECT_GT(moved, natural.numel() / 10) << what << ": the permuted order moved " << moved << " of "
                                         << natural.numel() << " outputs";
}

void expect_add_and_scale_in_place(const Tensor& a, const Tensor& b, double factor, const std::string& what) {
  Tensor expected = run_on("cpu", "add", {a, b})[0];
  Tensor in_place = a.clone();
  dispatcher("cpu").run("add", {in_place, b}, {in_place});
  expect_identical(in_place, expected, what + " add in place");
  Tensor scaled = run_on("cpu", "scale", {a}, {{"factor", factor}})[0];
  Tensor scaled_in_place = a.clone();
  dispatcher("cpu").run("scale", {scaled_in_place}, {scaled_in_place}, {{"factor", factor}});
  expect_identical(scaled_in_place, scaled, what + " scale in place");
}

void for_each_bf16_attention_path(const std::function<void(const std::string& path)>& check) {
  if (cpu::runs_on_amx_tiles()) check("AMX tiles");
  cpu::set_amx_tiles_allowed(false);
  check("AVX-512 BF16");
  cpu::set_amx_tiles_allowed(true);
}

}  // namespace strata::testing
