#include "backends/opencl/program_cache.h"

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/file_io.h"

namespace strata::opencl {

namespace {

// Every kernel reads and writes IEEE f32 exactly as written: no fast-math contractions, so
// results stay within the f32 tolerances against `ref` on every driver.
constexpr const char* kBuildOptions = "-cl-std=CL1.2";

uint64_t fnv1a(uint64_t hash, std::string_view text) {
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  return hash ^ 0xff;  // separates the fields
}

std::string cache_key(const DeviceInfo& device, const std::string& source) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (std::string_view field : {std::string_view(device.platform), std::string_view(device.name),
                                 std::string_view(device.version), std::string_view(device.driver_version),
                                 std::string_view(kBuildOptions), std::string_view(source)}) {
    hash = fnv1a(hash, field);
  }
  return fmt::format("{:016x}.bin", hash);
}

std::string build_log(cl_program program, cl_device_id device) {
  size_t size = 0;
  clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size);
  std::string log(size, '\0');
  clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr);
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

cl_program from_binary(cl_context context, const DeviceInfo& device, const std::vector<unsigned char>& binary) {
  const unsigned char* data = binary.data();
  const size_t size = binary.size();
  cl_int binary_status = CL_SUCCESS;
  cl_int status = CL_SUCCESS;
  cl_program program = clCreateProgramWithBinary(context, 1, &device.device_id, &size, &data, &binary_status, &status);
  if (status != CL_SUCCESS || binary_status != CL_SUCCESS) {
    if (program) clReleaseProgram(program);
    return nullptr;
  }
  if (clBuildProgram(program, 1, &device.device_id, kBuildOptions, nullptr, nullptr) != CL_SUCCESS) {
    clReleaseProgram(program);
    return nullptr;
  }
  return program;
}

std::vector<unsigned char> program_binary(cl_program program) {
  size_t size = 0;
  check(clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof(size), &size, nullptr), "clGetProgramInfo");
  std::vector<unsigned char> binary(size);
  unsigned char* data = binary.data();
  check(clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof(data), &data, nullptr), "clGetProgramInfo");
  return binary;
}

std::vector<unsigned char> read_binary(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

std::filesystem::path default_program_cache_dir() {
  if (const char* dir = std::getenv("STRATA_CACHE_DIR"); dir && *dir) return std::filesystem::path(dir) / "opencl";
  if (const char* dir = std::getenv("XDG_CACHE_HOME"); dir && *dir) return std::filesystem::path(dir) / "strata" / "opencl";
  if (const char* home = std::getenv("HOME"); home && *home) return std::filesystem::path(home) / ".cache" / "strata" / "opencl";
  return std::filesystem::temp_directory_path() / "strata-cache" / "opencl";
}

ProgramBuild build_program(cl_context context, const DeviceInfo& device, const std::string& source,
                           const std::filesystem::path& cache_dir) {
  const std::filesystem::path cached = cache_dir / cache_key(device, source);
  if (std::vector<unsigned char> binary = read_binary(cached); !binary.empty()) {
    if (cl_program program = from_binary(context, device, binary)) return {program, true};
    spdlog::warn("OpenCL program cache: {} is not a usable binary for {}; compiling again", cached.string(), device.name);
  }
  const char* text = source.c_str();
  const size_t length = source.size();
  cl_int status = CL_SUCCESS;
  cl_program program = clCreateProgramWithSource(context, 1, &text, &length, &status);
  check(status, "clCreateProgramWithSource");
  if (clBuildProgram(program, 1, &device.device_id, kBuildOptions, nullptr, nullptr) != CL_SUCCESS) {
    const std::string log = build_log(program, device.device_id);
    clReleaseProgram(program);
    fail("OpenCL: a Strata kernel program does not compile for {}:\n{}", device.name, log);
  }
  try {
    std::filesystem::create_directories(cache_dir);
    const std::vector<unsigned char> binary = program_binary(program);
    write_file_atomic(cached, std::span(reinterpret_cast<const std::byte*>(binary.data()), binary.size()));
  } catch (const std::exception& error) {
    spdlog::warn("OpenCL program cache: cannot store a compiled program in {} ({}); the next start compiles again",
                 cache_dir.string(), error.what());
  }
  return {program, false};
}

}  // namespace strata::opencl
