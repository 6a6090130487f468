#pragma once
// The OpenCL headers at the version Strata targets (1.2: every vendor's driver and PoCL), and
// one check that turns a failed call into an Error naming the call and the status.
#undef CL_TARGET_OPENCL_VERSION  // oneDNN's CMake target sets its own for its headers
#define CL_TARGET_OPENCL_VERSION 120
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>

#include <string_view>

#include "core/error.h"

namespace strata::opencl {

std::string_view status_name(cl_int status);

inline void check(cl_int status, std::string_view call) {
  if (status != CL_SUCCESS) [[unlikely]] fail("OpenCL: {} failed: {} ({})", call, status_name(status), status);
}

}  // namespace strata::opencl
