// Kernels for narrow dtypes that the cpu backend computes with its f32
// kernels: every f16 op, and the bf16 ops that have no native kernel
// (layernorm and embedding, which the default precision policy keeps in f32
// anyway). Narrow inputs are widened to f32 copies, the f32 kernel runs, and
// narrow outputs are rounded once from its f32 results, which is what the op
// semantics (and ref) prescribe; f32 and index tensors pass through. The
// copies cost a pass over memory each, far less than ref's f64 loops (this CPU
// has no f16 arithmetic, so f16 could not do better natively). Outputs may
// alias inputs as the f32 kernel allows: all inputs are copied before any
// output is written.
#include <algorithm>

#include "backends/cpu/convert.h"
#include "backends/cpu/cpu_ops.h"
#include "backends/cpu/scratch.h"

namespace strata::cpu {

namespace {

constexpr int kSlots = 8;  // the widened_scratch slots, one per narrow input or output

bool is_narrow(DType dtype) { return dtype == DType::BF16 || dtype == DType::F16; }

KernelFn through_f32(const std::string& op, KernelFn f32_kernel) {
  return [op, f32_kernel](const Tensors& in, const Tensors& out, const Attrs& attrs) {
    auto narrow = [](const Tensor& tensor) { return is_narrow(tensor.dtype()); };
    STRATA_CHECK(std::count_if(in.begin(), in.end(), narrow) + std::count_if(out.begin(), out.end(), narrow) <= kSlots,
                 "op '{}' has too many narrow tensors to widen", op);
    int slot = 0;
    auto wide_view = [&](const Tensor& tensor) {
      auto* data = static_cast<float*>(widened_scratch_bytes(slot++, static_cast<size_t>(tensor.numel()) * 4));
      return Tensor::borrow(data, tensor.shape(), DType::F32);
    };
    Tensors wide_in, wide_out;
    for (const Tensor& tensor : in) {
      if (!is_narrow(tensor.dtype())) {
        wide_in.push_back(tensor);
        continue;
      }
      wide_in.push_back(wide_view(tensor));
      widen_to_f32(tensor, wide_in.back().data<float>());
    }
    for (const Tensor& tensor : out) wide_out.push_back(is_narrow(tensor.dtype()) ? wide_view(tensor) : tensor);
    f32_kernel(wide_in, wide_out, attrs);
    for (size_t i = 0; i < out.size(); ++i) {
      if (is_narrow(out[i].dtype())) narrow_from_f32(wide_out[i].data<float>(), out[i]);
    }
  };
}

}  // namespace

void register_through_f32(Backend& backend) {
  for (const auto& [op, dtype] : backend.kernels()) {
    if (dtype != DType::F32 || op == "cast") continue;
    const KernelFn& f32_kernel = *backend.find(op, DType::F32);
    for (DType narrow : {DType::BF16, DType::F16}) {
      if (backend.find(op, narrow) == nullptr) backend.add_emulated_kernel(op, narrow, through_f32(op, f32_kernel));
    }
  }
}

}  // namespace strata::cpu
