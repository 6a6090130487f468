#pragma once
// Kernel times measured on an accelerator by bench/planner/gpu/measure_kernels.py
// (schema "strata-gpu-kernels-1"): GEMMs over transformer shapes and
// constructed tile, wave and alignment sweeps, fused attention forward and
// backward per backend, bandwidth-bound ops, and the per-call floor. And the
// matrix rate it sustains at its power limit, by measure_sustained.py (schema
// "strata-gpu-sustained-1").
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "planner/engine_fit.h"

namespace strata {

struct MeasuredGemm {
  std::string set;  // the script's shape family: a (layers), b (tile sweep), c (waves), d (alignment), ...
  std::string tag;
  GemmMeasurement sample;
};

struct MeasuredAttention {
  std::string backend;  // flash, cudnn, ...
  AttentionMeasurement sample;
};

struct MeasuredMemoryOp {
  std::string op;
  DType dtype = DType::F32;
  double elements = 0;
  double bytes = 0;
  double seconds = 0;
};

struct KernelMeasurements {
  std::string source;  // the file
  std::string device;  // as the driver names it
  int compute_units = 0;
  // One tiny op (an add; a matmul) per call, back to back: below a few of these, times are the host's.
  double launch_floor_s = 0;
  double gemm_floor_s = 0;
  std::map<DType, std::vector<MeasuredGemm>> gemm;
  std::vector<MeasuredAttention> attention;
  std::vector<MeasuredMemoryOp> memory_ops;
};

// Throws naming the file and the record of anything missing or malformed.
KernelMeasurements load_kernel_measurements(const std::filesystem::path& path);

// A large layer's GEMMs run back to back until the card sits at its power limit.
struct SustainedMeasurement {
  std::string source;  // the file
  std::string device;
  DType dtype = DType::BF16;
  double seconds = 0;          // how long they ran
  size_t shapes = 0;           // GEMM shapes in each round
  double sustained_flops = 0;  // FLOP/s over the last third of the run
};

// Throws naming the file and the key of anything missing or malformed.
SustainedMeasurement load_sustained_measurement(const std::filesystem::path& path);

}  // namespace strata
