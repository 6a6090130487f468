#pragma once
#include "ops/backend.h"

namespace strata {

// oneDNN GEMMs, vectorised and threaded element-wise, norm, attention and loss kernels.
void register_cpu_kernels(Backend& backend);

}  // namespace strata
