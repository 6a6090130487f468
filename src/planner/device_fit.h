#pragma once
// A device description fitted to kernels measured on it
// (planner/kernel_measurements.h): the matrix engine of each measured dtype,
// fused attention from one backend's forward and backward times, and the
// share of the memory bandwidth that streaming kernels reach. The structure
// (compute units, tiles, steps, alignment) and the datasheet peaks stay the
// description's own; only what engine_fit.h fits changes, and the per-op
// efficiency of the memory-bound kernels measured. Then every measured
// kernel is priced again, to show how well the one model predicts each.
#include <map>
#include <string>
#include <vector>

#include "planner/hardware.h"
#include "planner/kernel_measurements.h"

namespace strata {

struct DeviceFitOptions {
  std::string attention_backend = "cudnn";  // the fused kernel frameworks use on Hopper by default
  bool memory = true;                       // fit memory_efficiency (off: the device measured is not this one)
  // Times below this many launch floors (a GEMM's: a tiny matmul's) are the host's, not the
  // kernel's: compared, not fitted.
  double host_bound_floors = 2.5;
  // The matrix rate the device sustains at its power limit (measure_sustained.py), in the dtype measured and
  // the dtypes that take its fit (f16 of bf16); the tiles are fitted below it. 0: the description's own.
  double sustained_matrix_flops = 0;
  DType sustained_dtype = DType::BF16;
};

struct KernelComparison {
  std::string kind;  // gemm, attention, memory
  std::string set;   // gemm: the sweep; attention: backend and pass; memory: the op
  std::string what;  // shape
  DType dtype = DType::BF16;
  double measured_s = 0;
  double predicted_s = 0;
  bool fitted = false;  // among the samples the fit used
};

struct DeviceFit {
  DeviceSpec device;
  std::map<DType, FitQuality> gemm;
  std::map<DType, size_t> gemm_samples;  // fitted ones
  FitQuality attention;
  double memory_efficiency = 0;  // fitted, or the description's
  // Memory-bound kernels the planner prices at their ideal traffic (a norm, GeLU, AdamW), by dtype: the time that
  // traffic takes at the rate the measured device's large copies and adds reached, over the kernel's measured time.
  std::map<DType, std::map<std::string, double>> op_efficiency;
  std::vector<KernelComparison> kernels;
};

DeviceFit fit_device(const DeviceSpec& base, const KernelMeasurements& measured, const DeviceFitOptions& options);

}  // namespace strata
