#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>

#include "backends/ref/ref_io.h"
#include "core/exact_square_sum.h"
#include "backends/ref/ref_ops.h"
#include "ops/collective_group.h"
#include "ops/expert_exchange.h"

namespace strata::ref {

namespace {

// GPT-2's tanh approximation of GELU and its derivative.
constexpr double kGeluCubic = 0.044715;
const double kGeluScale = std::sqrt(2.0 / std::numbers::pi);

double gelu(double x) { return 0.5 * x * (1.0 + std::tanh(kGeluScale * (x + kGeluCubic * x * x * x))); }

double gelu_derivative(double x) {
  double t = std::tanh(kGeluScale * (x + kGeluCubic * x * x * x));
  double dinner = kGeluScale * (1.0 + 3.0 * kGeluCubic * x * x);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * dinner;
}

void add(const Tensors& in, const Tensors& out, const Attrs&) {
  std::vector<double> a = load(in[0]);
  std::vector<double> b = load(in[1]);
  // b's shape is a suffix of a's: b repeats every b.size() elements of a.
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i % b.size()];
  store(out[0], a);
}

void sum_to(const Tensors& in, const Tensors& out, const Attrs&) {
  std::vector<double> x = load(in[0]);
  std::vector<double> sum(static_cast<size_t>(out[0].numel()), 0.0);
  for (size_t i = 0; i < x.size(); ++i) sum[i % sum.size()] += x[i];
  store(out[0], sum);
}

void scale(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  double factor = attrs.get_float("factor");
  std::vector<double> x = load(in[0]);
  for (double& value : x) value *= factor;
  store(out[0], x);
}

void sum_squares(const Tensors& in, const Tensors& out, const Attrs&) {
  double sum = 0.0;
  for (double value : load(in[0])) sum += value * value;
  store(out[0], {sum});
}

// The squares' exact sum: load() widens f32 and bf16 exactly, and back to f32 is exact too.
void square_sum_exact(const Tensors& in, const Tensors& out, const Attrs&) {
  std::vector<double> wide = load(in[0]);
  std::vector<float> x(wide.begin(), wide.end());
  ExactSquareSum sum;
  sum.add(x.data(), static_cast<int64_t>(x.size()));
  std::array<int64_t, ExactSquareSum::kWords> words = sum.words();
  std::copy(words.begin(), words.end(), out[0].data<int64_t>());
}

void gelu_forward(const Tensors& in, const Tensors& out, const Attrs&) {
  std::vector<double> x = load(in[0]);
  for (double& value : x) value = gelu(value);
  store(out[0], x);
}

void gelu_backward(const Tensors& in, const Tensors& out, const Attrs&) {
  std::vector<double> dy = load(in[0]);
  std::vector<double> x = load(in[1]);
  for (size_t i = 0; i < dy.size(); ++i) dy[i] *= gelu_derivative(x[i]);
  store(out[0], dy);
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

void swiglu(const Tensors& in, const Tensors& out, const Attrs&) {
  std::vector<double> gate = load(in[0]);
  std::vector<double> up = load(in[1]);
  for (size_t i = 0; i < gate.size(); ++i) gate[i] *= sigmoid(gate[i]) * up[i];
  store(out[0], gate);
}

void swiglu_backward(const Tensors& in, const Tensors& out, const Attrs&) {
  std::vector<double> dy = load(in[0]);
  std::vector<double> gate = load(in[1]);
  std::vector<double> up = load(in[2]);
  std::vector<double> dgate(dy.size()), dup(dy.size());
  for (size_t i = 0; i < dy.size(); ++i) {
    double s = sigmoid(gate[i]);
    dgate[i] = dy[i] * up[i] * s * (1.0 + gate[i] * (1.0 - s));
    dup[i] = dy[i] * gate[i] * s;
  }
  store(out[0], dgate);
  store(out[1], dup);
}

// load/store round once from double: exact for every pair of floating dtypes.
void cast(const Tensors& in, const Tensors& out, const Attrs&) { store(out[0], load(in[0])); }


}  // namespace

void register_elementwise(Backend& backend) {
  add_float_kernels(backend, "reshape", cast);  // the same values, another shape
  add_float_kernels(backend, "cast", cast);
  add_float_kernels(backend, "add", add);
  add_float_kernels(backend, "sum_to", sum_to);
  add_float_kernels(backend, "scale", scale);
  add_float_kernels(backend, "sum_squares", sum_squares);
  backend.add_kernel("square_sum_exact", DType::F32, square_sum_exact);
  backend.add_kernel("square_sum_exact", DType::BF16, square_sum_exact);
  add_float_kernels(backend, "gelu", gelu_forward);
  add_float_kernels(backend, "gelu_backward", gelu_backward);
  add_float_kernels(backend, "swiglu", swiglu);
  add_float_kernels(backend, "swiglu_backward", swiglu_backward);
  // Collectives: the group does the work, the same on every backend.
  add_float_kernels(backend, "all_reduce", all_reduce_kernel);
  add_float_kernels(backend, "copy_to_group", copy_to_group_kernel);
  add_float_kernels(backend, "all_gather", all_gather_kernel);
  add_float_kernels(backend, "gather_to_group", all_gather_kernel);
  add_float_kernels(backend, "reduce_scatter", reduce_scatter_kernel);
  add_float_kernels(backend, "split_to_group", split_to_group_kernel);
  add_float_kernels(backend, "all_to_all", all_to_all_kernel);
  add_float_kernels(backend, "send_to_stage", send_to_stage_kernel);
  add_float_kernels(backend, "receive_from_stage", receive_from_stage_kernel);
  add_float_kernels(backend, "moe_dispatch_exchange", moe_dispatch_exchange_kernel);
  add_float_kernels(backend, "moe_return_exchange", moe_return_exchange_kernel);
}

}  // namespace strata::ref
