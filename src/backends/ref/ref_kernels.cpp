#include "backends/ref/ref_kernels.h"

#include "backends/ref/ref_ops.h"

namespace strata {

void register_ref_kernels(Backend& backend) {
  ref::register_elementwise(backend);
  ref::register_adamw(backend);
  ref::register_embedding(backend);
  ref::register_layernorm(backend);
  ref::register_rms_norm(backend);
  ref::register_rope(backend);
  ref::register_matmul(backend);
  ref::register_attention(backend);
  ref::register_cross_entropy(backend);
  ref::register_attention_parts(backend);
  ref::register_fused(backend);
  ref::register_moe(backend);
  ref::register_grouped_matmul(backend);
}

}  // namespace strata
