#include "backends/opencl/opencl_kernels.h"

#include "backends/opencl/opencl_ops.h"

namespace strata {

void register_opencl_kernels(Backend& backend) {
  opencl::register_matmul(backend);
  opencl::register_elementwise(backend);
  opencl::register_reductions(backend);
  opencl::register_norms(backend);
  opencl::register_rope_swiglu(backend);
  opencl::register_vocab(backend);
  opencl::register_attention(backend);
  opencl::register_attention_parts(backend);
  opencl::register_through_f32(backend);  // last: it covers the dtypes the others lack
}

}  // namespace strata
