#include "backends/cpu/cpu_kernels.h"

#include "backends/cpu/cpu_ops.h"

namespace strata {

void register_cpu_kernels(Backend& backend) {
  cpu::register_elementwise(backend);
  cpu::register_reductions(backend);
  cpu::register_square_sum_exact(backend);
  cpu::register_adamw(backend);
  cpu::register_embedding(backend);
  cpu::register_layernorm(backend);
  cpu::register_rms_norm(backend);
  cpu::register_rope(backend);
  cpu::register_swiglu(backend);
  cpu::register_matmul(backend);
  cpu::register_attention(backend);
  cpu::register_cross_entropy(backend);
  cpu::register_cast(backend);
  cpu::register_attention_parts(backend);
  cpu::register_fused(backend);
  cpu::register_moe_router(backend);
  cpu::register_moe_permute(backend);
  cpu::register_grouped_matmul(backend);
  cpu::register_through_f32(backend);  // last: it covers the dtypes the others lack
}

}  // namespace strata
