#pragma once
// Fills the `opencl` backend's kernel table. The kernels run on whichever OpenCL device their
// tensors live on; ops.device chooses it (opencl_device.h).
#include "ops/backend.h"

namespace strata {

void register_opencl_kernels(Backend& backend);

}  // namespace strata
