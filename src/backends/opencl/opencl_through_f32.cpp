// bf16 and f16 kernels that compute with the f32 ones, on the device: narrow inputs are cast to
// f32 copies there, the f32 kernel runs, narrow outputs are rounded once from its results (what
// the ops' semantics and ref prescribe). They are registered as emulated, because OpenCL C has no
// bf16 arithmetic and a device without cl_khr_fp16 none in f16: the dispatcher reports them, and
// the trainer runs them only when ops.emulate allows it. Outputs may alias inputs as the f32 kernel
// allows, since every input is cast before any output is written.
#include "backends/opencl/opencl_ops.h"

namespace strata::opencl {

namespace {

bool is_narrow(DType dtype) { return dtype == DType::BF16 || dtype == DType::F16; }

KernelFn through_f32(KernelFn f32_kernel, const Backend& backend) {
  return [f32_kernel, &backend](const Tensors& in, const Tensors& out, const Attrs& attrs) {
    const Attrs to_f32{{"dtype", std::string("f32")}};
    Tensors wide_in, wide_out;
    for (const Tensor& tensor : in) {
      if (!is_narrow(tensor.dtype())) {
        wide_in.push_back(tensor);
        continue;
      }
      wide_in.push_back(Tensor::empty(tensor.shape(), DType::F32, tensor.device()));
      (*backend.find("cast", tensor.dtype()))({tensor}, {wide_in.back()}, to_f32);
    }
    for (const Tensor& tensor : out) {
      wide_out.push_back(is_narrow(tensor.dtype()) ? Tensor::empty(tensor.shape(), DType::F32, tensor.device()) : tensor);
    }
    f32_kernel(wide_in, wide_out, attrs);
    for (size_t i = 0; i < out.size(); ++i) {
      if (!is_narrow(out[i].dtype())) continue;
      (*backend.find("cast", DType::F32))({wide_out[i]}, {out[i]}, {{"dtype", std::string(dtype_name(out[i].dtype()))}});
    }
  };
}

}  // namespace

void register_through_f32(Backend& backend) {
  for (const auto& [op, dtype] : backend.kernels()) {
    if (dtype != DType::F32 || op == "cast") continue;
    const KernelFn f32_kernel = *backend.find(op, DType::F32);
    for (DType narrow : {DType::BF16, DType::F16}) {
      if (backend.find(op, narrow) == nullptr) backend.add_emulated_kernel(op, narrow, through_f32(f32_kernel, backend));
    }
  }
}

}  // namespace strata::opencl
