// The fused ops of graph/fusion.h, computed in f32:
// - add_layernorm: per row, the residual sum is written once and normalised
//   from L1 (x and r are read once);
// - layernorm_backward_add: layernorm_backward whose dx starts from dres;
// - fused_elementwise<n>: an interpreter that runs the whole program over
//   blocks of kBlock elements held in per-thread registers, so intermediates
//   never reach memory.
// Formulas and roundings are those of the unfused cpu kernels (x + r rounded to
// x's dtype before the norm, each program register rounded to its dtype), and
// the layernorm rows are those of layernorm_rows.h, shared with
// cpu_layernorm.cpp, so results do not depend on the thread count.
#include <type_traits>
#include <vector>

#include "backends/cpu/convert.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/layernorm_rows.h"
#include "backends/cpu/parallel.h"
#include "backends/cpu/scratch.h"
#include "backends/cpu/simd.h"
#include "ops/fused_program.h"

namespace strata::cpu {

namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

// ---- add_layernorm -------------------------------------------------------------

// Rows [row_begin, row_end); r row `row mod r_rows` pairs with x row `row`.
// `rounded` (width floats) holds the stored sum of the current row, and
// `r_wide` (width floats) a narrow r row widened for f32 x.
template <typename X, typename R>
STRATA_CPU_CLONES void add_layernorm_rows(const X* x, const R* r, int64_t r_rows, const X* gamma, const X* beta,
                                          int64_t width, float eps, int64_t row_begin, int64_t row_end, X* sum,
                                          X* y, float* mean_out, float* rstd_out, float* rounded, float* r_wide) {
  for (int64_t row = row_begin; row < row_end; ++row) {
    const X* x_row = x + row * width;
    const R* r_row = r + (row % r_rows) * width;
    X* sum_row = sum + row * width;
    float total = 0.0f;
    if constexpr (std::is_same_v<X, bf16>) {
      store_residual_sum(x_row, r_row, width, sum_row, rounded);
#pragma omp simd reduction(+ : total)
      for (int64_t c = 0; c < width; ++c) total += rounded[c];
    } else {  // the f32 sum adds up in the loop that stores it (its summation order, which the bits depend on)
      const float* r_values = f32_row(r_row, width, r_wide);  // a narrow r widened first (convert.h says why)
#pragma omp simd reduction(+ : total)
      for (int64_t c = 0; c < width; ++c) {
        X stored = from_f32<X>(to_f32(x_row[c]) + r_values[c]);
        sum_row[c] = stored;
        rounded[c] = to_f32(stored);
        total += rounded[c];
      }
    }
    normalize_row(rounded, total, gamma, beta, width, eps, y + row * width, mean_out + row, rstd_out + row);
  }
}

template <typename X, typename R>
void add_layernorm_typed(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  int64_t width = in[0].size(-1);
  int64_t rows = leading_rows(in[0]);
  int64_t r_rows = in[1].numel() / width;
  auto eps = static_cast<float>(attrs.get_float("eps"));
  const X* x = in[0].data<X>();
  const R* r = in[1].data<R>();
  const X* gamma = in[2].data<X>();
  const X* beta = in[3].data<X>();
  X* sum = out[0].data<X>();
  X* y = out[1].data<X>();
  float* mean = out[2].data<float>();
  float* rstd = out[3].data<float>();
  parallel_chunks(rows, kLayernormRowGrain, [&](int64_t begin, int64_t end) {
    float* rounded = thread_scratch<float>(0, static_cast<size_t>(width));
    float* r_wide = std::is_same_v<R, float> ? nullptr : thread_scratch<float>(1, static_cast<size_t>(width));
    add_layernorm_rows(x, r, r_rows, gamma, beta, width, eps, begin, end, sum, y, mean, rstd, rounded, r_wide);
  });
}

template <typename X>
void add_layernorm(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  switch (in[1].dtype()) {
    case DType::F32:
      if constexpr (std::is_same_v<X, float>) return add_layernorm_typed<X, float>(in, out, attrs);
      break;
    case DType::BF16: return add_layernorm_typed<X, bf16>(in, out, attrs);
    case DType::F16:
      if constexpr (std::is_same_v<X, float>) return add_layernorm_typed<X, fp16>(in, out, attrs);
      break;
    default: break;
  }
  STRATA_CHECK(false, "add_layernorm: r is {} for x {}", dtype_name(in[1].dtype()), dtype_name(in[0].dtype()));
}

// ---- layernorm_backward_add --------------------------------------------------

template <typename DY, typename X>
void layernorm_backward_add_typed(const Tensors& in, const Tensors& out) {
  layernorm_backward_blocks<DY, X, /*kAddResidual=*/true>(
      in[0].data<DY>(), in[1].data<X>(), in[2].data<X>(), in[3].data<float>(), in[4].data<float>(), in[5].data<X>(),
      leading_rows(in[1]), in[1].size(-1), out[0].data<X>(), out[1].data<X>(), out[2].data<X>());
}

template <typename X>
void layernorm_backward_add(const Tensors& in, const Tensors& out, const Attrs&) {
  switch (in[0].dtype()) {
    case DType::F32:
      if constexpr (std::is_same_v<X, float>) return layernorm_backward_add_typed<float, X>(in, out);
      break;
    case DType::BF16: return layernorm_backward_add_typed<bf16, X>(in, out);
    case DType::F16:
      if constexpr (std::is_same_v<X, float>) return layernorm_backward_add_typed<fp16, X>(in, out);
      break;
    default: break;
  }
  STRATA_CHECK(false, "layernorm_backward_add: dy is {} for x {}", dtype_name(in[0].dtype()),
               dtype_name(in[1].dtype()));
}

// ---- fused_elementwise -------------------------------------------------------------

constexpr int64_t kBlock = 256;     // elements per register: 1 KiB, all registers of a program fit L1
constexpr int64_t kGrain = 16384;   // elements per parallel chunk

// The program decoded for the interpreter, with its operands' storage.
struct Machine {
  FusedProgram program;
  std::vector<DType> dtypes;           // per register
  std::vector<const void*> inputs;     // per input
  std::vector<int64_t> input_counts;   // elements per input (a suffix of the output repeats)
  int64_t numel = 0;
};

// Loads elements [begin, begin + n) of input `data` (repeating every `count`).
template <typename T>
STRATA_CPU_CLONES void load_block(const T* data, int64_t count, int64_t begin, int64_t n, float* out) {
  int64_t column = begin % count;
  for (int64_t j = 0; j < n;) {
    int64_t run = std::min(n - j, count - column);
    const T* source = data + column;
    float* target = out + j;
#pragma omp simd
    for (int64_t i = 0; i < run; ++i) target[i] = to_f32(source[i]);
    j += run;
    column = 0;
  }
}

void load_input(const Machine& machine, size_t input, int64_t begin, int64_t n, float* out) {
  const void* data = machine.inputs[input];
  int64_t count = machine.input_counts[input];
  switch (machine.dtypes[input]) {
    case DType::F32: return load_block(static_cast<const float*>(data), count, begin, n, out);
    case DType::BF16: return load_block(static_cast<const bf16*>(data), count, begin, n, out);
    case DType::F16: return load_block(static_cast<const fp16*>(data), count, begin, n, out);
    default: break;
  }
  STRATA_CHECK(false, "fused_elementwise input of dtype {}", dtype_name(machine.dtypes[input]));
}

// out = op(a, b) over n elements, rounded to `dtype` as the unfused op stores it.
STRATA_CPU_CLONES void execute_block(const FusedInstruction& instruction, DType dtype, const float* a,
                                     const float* b, int64_t n, float* out) {
  switch (instruction.opcode) {
    case FusedOpcode::Add:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
      break;
    case FusedOpcode::Scale: {
      auto factor = static_cast<float>(instruction.factor);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] * factor;
      break;
    }
    case FusedOpcode::Gelu:  // the formulas of cpu_elementwise.cpp
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        float v = a[i];
        float e = exp_approx(-2.0f * kGeluScale * (v + kGeluCubic * v * v * v));
        out[i] = v / (1.0f + e);
      }
      break;
    case FusedOpcode::GeluBackward:  // a = dy, b = x
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        float v = b[i];
        float e = exp_approx(-2.0f * kGeluScale * (v + kGeluCubic * v * v * v));
        float s = 1.0f / (1.0f + e);
        float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCubic * v * v);
        float one_minus_s = e * s;
        out[i] = a[i] * s * (1.0f + 2.0f * v * du_dx * one_minus_s);
      }
      break;
    case FusedOpcode::Cast:
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) out[i] = a[i];
      break;
  }
  if (dtype == DType::BF16) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) out[i] = to_f32(from_f32<bf16>(out[i]));
  } else if (dtype == DType::F16) {
    for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_float(float_to_fp16(out[i]));
  }
}

template <typename T>
STRATA_CPU_CLONES void store_block(const float* values, int64_t n, T* out) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = from_f32<T>(values[i]);
}

template <>
void store_block(const float* values, int64_t n, bf16* out) {
  narrow_to_bf16(values, out, n);
}

void store_output(const float* values, int64_t n, const Tensor& out, int64_t begin) {
  switch (out.dtype()) {
    case DType::F32: return store_block(values, n, out.data<float>() + begin);
    case DType::BF16: return store_block(values, n, out.data<bf16>() + begin);
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) out.data<fp16>()[begin + i] = float_to_fp16(values[i]);
      return;
    default: break;
  }
  STRATA_CHECK(false, "fused_elementwise output of dtype {}", dtype_name(out.dtype()));
}

// Runs the program over elements [begin, end). f32 inputs that are not
// broadcast are read in place; the rest are converted into their register.
void run_chunk(const Machine& machine, const Tensor& out, int64_t begin, int64_t end) {
  size_t inputs = machine.inputs.size();
  auto registers = static_cast<size_t>(machine.program.num_registers());
  float* storage = thread_scratch<float>(1, registers * kBlock);
  std::vector<const float*> views(registers);
  for (int64_t block = begin; block < end; block += kBlock) {
    int64_t n = std::min(kBlock, end - block);
    for (size_t i = 0; i < inputs; ++i) {
      if (machine.dtypes[i] == DType::F32 && machine.input_counts[i] == machine.numel) {
        views[i] = static_cast<const float*>(machine.inputs[i]) + block;
      } else {
        load_input(machine, i, block, n, storage + i * kBlock);
        views[i] = storage + i * kBlock;
      }
    }
    for (size_t k = 0; k < machine.program.code.size(); ++k) {
      const FusedInstruction& instruction = machine.program.code[k];
      size_t r = inputs + k;
      auto source = static_cast<size_t>(instruction.a);
      if (instruction.opcode == FusedOpcode::Cast &&
          (machine.dtypes[r] == DType::F32 || machine.dtypes[r] == machine.dtypes[source])) {
        views[r] = views[source];  // f32 holds every register value exactly: nothing to round
        continue;
      }
      float* result = storage + r * kBlock;
      const float* b = instruction.b >= 0 ? views[static_cast<size_t>(instruction.b)] : nullptr;
      execute_block(instruction, machine.dtypes[r], views[static_cast<size_t>(instruction.a)], b, n, result);
      views[r] = result;
    }
    store_output(views.back(), n, out, block);
  }
}

void fused_elementwise(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  Machine machine;
  machine.program = FusedProgram::parse(attrs.get_string("program"), static_cast<int>(in.size()));
  std::vector<DType> input_dtypes;
  for (const Tensor& tensor : in) {
    input_dtypes.push_back(tensor.dtype());
    machine.inputs.push_back(tensor.raw());
    machine.input_counts.push_back(tensor.numel());
  }
  machine.dtypes = machine.program.register_dtypes(input_dtypes);
  for (DType dtype : machine.dtypes) {
    if (dtype == DType::F64) {
      fail("op 'fused_elementwise{}': the cpu kernel computes in f32 and cannot hold f64 values (program '{}')",
           in.size(), attrs.get_string("program"));
    }
  }
  machine.numel = out[0].numel();
  if (machine.numel == 0) return;
  parallel_chunks(machine.numel, kGrain,
                  [&](int64_t begin, int64_t end) { run_chunk(machine, out[0], begin, end); });
}

}  // namespace

void register_fused(Backend& backend) {
  backend.add_kernel("add_layernorm", DType::F32, add_layernorm<float>);
  backend.add_kernel("add_layernorm", DType::BF16, add_layernorm<bf16>);
  backend.add_kernel("layernorm_backward_add", DType::F32, layernorm_backward_add<float>);
  backend.add_kernel("layernorm_backward_add", DType::BF16, layernorm_backward_add<bf16>);
  for (int n = 1; n <= kMaxFusedInputs; ++n) {
    backend.add_kernel(fused_elementwise_op(n), DType::F32, fused_elementwise);
    backend.add_kernel(fused_elementwise_op(n), DType::BF16, fused_elementwise);
  }
}

}  // namespace strata::cpu
