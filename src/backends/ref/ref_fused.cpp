// The fused ops in double, rounding where the unfused ops would store: the
// sum of add_layernorm and add_rms_norm (and add_rms_norm's y, before a
// narrower y_dtype) and every register of a fused program are rounded to
// their dtype, so these kernels give the bits of the unfused ref ops.
#include <cmath>
#include <numbers>

#include "backends/ref/ref_io.h"
#include "backends/ref/ref_layernorm.h"
#include "backends/ref/ref_ops.h"
#include "backends/ref/ref_rms_norm.h"
#include "ops/fused_program.h"

namespace strata::ref {

namespace {

// y rounded to x's dtype, before store rounds it to y's (y_dtype: the cast the op absorbed).
std::vector<double> rounded_to(DType dtype, std::vector<double> values) {
  for (double& value : values) value = round_to(dtype, value);
  return values;
}

void add_layernorm(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  std::vector<double> sum = load(in[0]);
  std::vector<double> r = load(in[1]);
  DType dtype = in[0].dtype();
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = round_to(dtype, sum[i] + r[i % r.size()]);
  LayerNormRows norm = layernorm_rows(sum, load(in[2]), load(in[3]), attrs.get_float("eps"));
  store(out[0], sum);
  store(out[1], norm.y);
  store(out[2], norm.mean);
  store(out[3], norm.rstd);
}

void layernorm_backward_add(const Tensors& in, const Tensors& out, const Attrs&) {
  std::vector<double> dres = load(in[5]);
  LayerNormGrads grads =
      layernorm_backward_rows(load(in[0]), load(in[1]), load(in[2]), load(in[3]), load(in[4]), &dres);
  store(out[0], grads.dx);
  store(out[1], grads.dgamma);
  store(out[2], grads.dbeta);
}

void add_rms_norm(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  std::vector<double> sum = load(in[0]);
  std::vector<double> r = load(in[1]);
  DType dtype = in[0].dtype();
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = round_to(dtype, sum[i] + r[i % r.size()]);
  store(out[0], sum);
  store(out[1], rounded_to(dtype, rms_norm_rows(sum, load(in[2]), attrs.get_float("eps"), dtype)));
}

void rms_norm_backward_add(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  std::vector<double> dres = load(in[3]);
  RmsNormGrads grads =
      rms_norm_backward_rows(load(in[0]), load(in[1]), load(in[2]), attrs.get_float("eps"), in[1].dtype(), &dres);
  store(out[0], grads.dx);
  store(out[1], grads.dweight);
}

constexpr double kGeluCubic = 0.044715;
const double kGeluScale = std::sqrt(2.0 / std::numbers::pi);

double execute(const FusedInstruction& instruction, const std::vector<double>& registers) {
  double a = registers[static_cast<size_t>(instruction.a)];
  double b = instruction.b >= 0 ? registers[static_cast<size_t>(instruction.b)] : 0.0;
  switch (instruction.opcode) {
    case FusedOpcode::Add: return a + b;
    case FusedOpcode::Scale: return a * instruction.factor;
    case FusedOpcode::Gelu: return 0.5 * a * (1.0 + std::tanh(kGeluScale * (a + kGeluCubic * a * a * a)));
    case FusedOpcode::GeluBackward: {  // a = dy, b = x
      double t = std::tanh(kGeluScale * (b + kGeluCubic * b * b * b));
      double dinner = kGeluScale * (1.0 + 3.0 * kGeluCubic * b * b);
      return a * (0.5 * (1.0 + t) + 0.5 * b * (1.0 - t * t) * dinner);
    }
    case FusedOpcode::Cast: return a;  // the rounding to the register's dtype is the cast
  }
  return 0.0;
}

void fused_elementwise(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  FusedProgram program = FusedProgram::parse(attrs.get_string("program"), static_cast<int>(in.size()));
  std::vector<DType> input_dtypes;
  std::vector<std::vector<double>> inputs;
  for (const Tensor& tensor : in) {
    input_dtypes.push_back(tensor.dtype());
    inputs.push_back(load(tensor));
  }
  std::vector<DType> dtypes = program.register_dtypes(input_dtypes);
  std::vector<double> result(static_cast<size_t>(out[0].numel()));
  std::vector<double> registers(dtypes.size());
  for (size_t e = 0; e < result.size(); ++e) {
    for (size_t i = 0; i < inputs.size(); ++i) registers[i] = inputs[i][e % inputs[i].size()];
    for (size_t k = 0; k < program.code.size(); ++k) {
      size_t r = inputs.size() + k;
      registers[r] = round_to(dtypes[r], execute(program.code[k], registers));
    }
    result[e] = registers.back();
  }
  store(out[0], result);
}

}  // namespace

void register_fused(Backend& backend) {
  add_float_kernels(backend, "add_layernorm", add_layernorm);
  add_float_kernels(backend, "layernorm_backward_add", layernorm_backward_add);
  add_float_kernels(backend, "add_rms_norm", add_rms_norm);
  add_float_kernels(backend, "rms_norm_backward_add", rms_norm_backward_add);
  for (int n = 1; n <= kMaxFusedInputs; ++n) add_float_kernels(backend, fused_elementwise_op(n), fused_elementwise);
}

}  // namespace strata::ref
