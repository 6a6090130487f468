#pragma once
#include "ops/backend.h"

namespace strata {

// Plain loops accumulating in double, for f64, f32, bf16 and f16.
void register_ref_kernels(Backend& backend);

}  // namespace strata
