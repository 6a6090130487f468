#pragma once
// OpenCL C programs built once per device and kept on disk, so that a second start does not
// compile again. A cached binary is keyed by the program's source, the build options, the
// device's name and OpenCL version, the platform and its driver version: a new driver or a changed
// kernel misses the cache and compiles. A cache that cannot be read or written costs a compile,
// never a failure.
#include <filesystem>
#include <string>

#include "backends/opencl/opencl_device.h"

namespace strata::opencl {

// $STRATA_CACHE_DIR/opencl, else $XDG_CACHE_HOME/strata/opencl, else ~/.cache/strata/opencl.
std::filesystem::path default_program_cache_dir();

struct ProgramBuild {
  cl_program program = nullptr;
  bool from_cache = false;
};

ProgramBuild build_program(cl_context context, const DeviceInfo& device, const std::string& source,
                           const std::filesystem::path& cache_dir);

}  // namespace strata::opencl
