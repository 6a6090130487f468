#include "planner/device_fit.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "core/error.h"
#include "planner/device_time.h"

namespace strata {

namespace {

// The measurement script's sets of real transformer GEMMs (layers; unfused attention's batched
// products): the planner prices these, so they weigh three times a constructed sweep in the fit.
const char* const kLayerShapes = "a";
const char* const kAttentionShapes = "f";

double median(std::vector<double> values) {
  STRATA_CHECK(!values.empty(), "median of nothing");
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// The measurement script's memory-bound kernels by the planner op they time (copy and add set the bandwidth itself;
// cross-entropy is timed forward and backward together, which no one planner op is).
const std::map<std::string, std::string> kMeasuredOps = {
    {"layer_norm", "layernorm"}, {"rms_norm", "rms_norm"}, {"gelu", "gelu"}, {"adamw_fused", "adamw"}};
// Tensors this large stream long enough that the launch is no part of their time.
const double kStreamingBytes = 256e6;

bool streams(const MeasuredMemoryOp& op) { return (op.op == "copy" || op.op == "add") && op.bytes >= kStreamingBytes; }

// Each measured op's ideal traffic at the large copies' and adds' rate over its measured time (the median over its
// large tensors; at most 1): what the planner divides the op's ideal-traffic time by.
std::map<DType, std::map<std::string, double>> fit_op_efficiency(const KernelMeasurements& measured) {
  std::vector<double> rates;
  for (const MeasuredMemoryOp& op : measured.memory_ops) {
    if (streams(op)) rates.push_back(op.bytes / op.seconds);
  }
  std::map<DType, std::map<std::string, std::vector<double>>> shares;
  for (const MeasuredMemoryOp& op : measured.memory_ops) {
    auto planner_op = kMeasuredOps.find(op.op);
    if (rates.empty() || planner_op == kMeasuredOps.end() || op.bytes < kStreamingBytes) continue;
    shares[op.dtype][planner_op->second].push_back(op.bytes / median(rates) / op.seconds);
  }
  std::map<DType, std::map<std::string, double>> efficiency;
  for (const auto& [dtype, ops] : shares) {
    for (const auto& [op, values] : ops) efficiency[dtype][op] = std::min(1.0, median(values));
  }
  return efficiency;
}

// The efficiency fitted to a measured memory op's planner op; 0 when none was.
double fitted_efficiency(const DeviceFit& fit, const MeasuredMemoryOp& op) {
  auto planner_op = kMeasuredOps.find(op.op);
  auto dtype = fit.op_efficiency.find(op.dtype);
  if (planner_op == kMeasuredOps.end() || dtype == fit.op_efficiency.end()) return 0;
  auto found = dtype->second.find(planner_op->second);
  return found == dtype->second.end() ? 0 : found->second;
}

double predict_attention(const AttentionMeasurement& a, const DeviceSpec& device, DType dtype) {
  OpWork op{a.shape.backward ? "attention_backward" : "attention", "attention", OpKind::Attention, a.flops, 0};
  op.attention = a.shape;
  return op_seconds(op, device, dtype);
}

void set_sustained_rate(DeviceSpec& device, const DeviceFitOptions& options) {
  if (!device.computes(options.sustained_dtype)) {
    fail("device '{}' has no {} matrix engine to give a sustained rate to", device.name, dtype_name(options.sustained_dtype));
  }
  DTypePerformance& perf = device.dtypes.at(options.sustained_dtype);
  if (options.sustained_matrix_flops > perf.matrix_flops) {
    fail("a sustained matrix rate of {} TFLOP/s is above device '{}''s {} peak of {}", options.sustained_matrix_flops / 1e12,
         device.name, dtype_name(options.sustained_dtype), perf.matrix_flops / 1e12);
  }
  perf.sustained_matrix_flops = options.sustained_matrix_flops;
}

// Each dtype's GEMM engine, from its GEMMs above the host's floor; every sweep weighs the same, however many shapes.
void fit_gemms(DeviceFit& fit, const KernelMeasurements& measured, double gemm_host_bound) {
  DeviceSpec& device = fit.device;
  for (auto& [dtype, gemms] : measured.gemm) {
    if (!device.computes(dtype)) continue;
    std::map<std::string, double> per_set;
    for (const MeasuredGemm& g : gemms) {
      if (g.sample.seconds >= gemm_host_bound) ++per_set[g.set];
    }
    std::vector<GemmMeasurement> samples;
    for (const MeasuredGemm& g : gemms) {
      if (g.sample.seconds < gemm_host_bound) continue;
      samples.push_back(g.sample);
      samples.back().weight = (g.set == kLayerShapes ? 6.0 : g.set == kAttentionShapes ? 3.0 : 1.0) / per_set[g.set];
    }
    if (samples.empty()) fail("{}: every {} GEMM ran below the host's floor; nothing to fit", measured.source, dtype_name(dtype));
    fit.gemm[dtype] = fit_gemm_engine(device.dtypes.at(dtype), samples, device.op_overhead_s);
    fit.gemm_samples[dtype] = samples.size();
  }
  if (fit.gemm.empty()) fail("{}: no GEMMs in a dtype device '{}' computes", measured.source, device.name);
}

// Attention, measured in bf16: one backend, both passes.
void fit_attention(DeviceFit& fit, const KernelMeasurements& measured, const std::string& backend, double host_bound) {
  std::vector<AttentionMeasurement> attention;
  for (const MeasuredAttention& a : measured.attention) {
    if (a.backend == backend && a.sample.seconds >= host_bound) attention.push_back(a.sample);
  }
  if (attention.empty()) fail("{}: no attention measured with backend '{}'", measured.source, backend);
  if (!fit.device.computes(DType::BF16)) fail("device '{}' has no bf16 matrix engine to fit attention to", fit.device.name);
  fit.attention = fit_attention_engine(fit.device.dtypes.at(DType::BF16), attention, fit.device.op_overhead_s);
}

// The memory efficiency (the share of the datasheet bandwidth large copies and adds reach, when `memory`) and each
// measured op's efficiency, a ratio to the card's own streaming rate so it holds where the memory is not fitted.
void fit_memory(DeviceFit& fit, const KernelMeasurements& measured, bool memory) {
  DeviceSpec& device = fit.device;
  fit.memory_efficiency = device.memory_efficiency;
  if (memory) {
    std::vector<double> shares;
    for (const MeasuredMemoryOp& op : measured.memory_ops) {
      if (streams(op)) shares.push_back(std::min(1.0, op.bytes / op.seconds / device.memory_bandwidth_Bps));
    }
    if (shares.empty()) fail("{}: no large copy or add to fit the memory efficiency to", measured.source);
    fit.memory_efficiency = device.memory_efficiency = median(shares);
  }
  for (const auto& [dtype, ops] : fit_op_efficiency(measured)) {
    if (!device.dtypes.count(dtype)) continue;
    fit.op_efficiency[dtype] = ops;
    device.dtypes.at(dtype).op_efficiency = ops;
  }
}

// f16 runs on the same tensor cores as bf16: an unmeasured f16 takes bf16's engines and per-op efficiency.
void share_f16(DeviceFit& fit) {
  DeviceSpec& device = fit.device;
  if (device.computes(DType::F16) && !fit.gemm.count(DType::F16) && fit.gemm.count(DType::BF16)) {
    const DTypePerformance& bf16 = device.dtypes.at(DType::BF16);
    device.dtypes.at(DType::F16).gemm = bf16.gemm;
    device.dtypes.at(DType::F16).attention = bf16.attention;
    device.dtypes.at(DType::F16).sustained_matrix_flops = bf16.sustained_matrix_flops;
  }
  if (device.dtypes.count(DType::F16) && fit.op_efficiency.count(DType::BF16) && !fit.op_efficiency.count(DType::F16)) {
    fit.op_efficiency[DType::F16] = fit.op_efficiency.at(DType::BF16);
    device.dtypes.at(DType::F16).op_efficiency = fit.op_efficiency.at(DType::BF16);
  }
}

// Every measured kernel priced by the fitted device, and whether the fit used it.
void price_every_kernel(DeviceFit& fit, const KernelMeasurements& measured, const DeviceFitOptions& options,
                        double host_bound, double gemm_host_bound) {
  const DeviceSpec& device = fit.device;
  for (const auto& [dtype, gemms] : measured.gemm) {
    if (!device.computes(dtype)) continue;
    for (const MeasuredGemm& g : gemms) {
      const GemmShape& s = g.sample.shape;
      fit.kernels.push_back({"gemm", g.set, fmt::format("{}x{}x{}x{}", s.batch, s.m, s.n, s.k), dtype,
                             g.sample.seconds, gemm_seconds(s, device, dtype), g.sample.seconds >= gemm_host_bound});
    }
  }
  for (const MeasuredAttention& a : measured.attention) {
    const AttentionShape& s = a.sample.shape;
    fit.kernels.push_back({"attention", fmt::format("{} {}", a.backend, s.backward ? "backward" : "forward"),
                           fmt::format("problems {} seq {} head_dim {}", s.problems, s.seq, s.head_dim), DType::BF16,
                           a.sample.seconds, predict_attention(a.sample, device, DType::BF16),
                           a.backend == options.attention_backend && a.sample.seconds >= host_bound});
  }
  for (const MeasuredMemoryOp& op : measured.memory_ops) {
    double predicted = device.op_overhead_s + op.bytes / (device.memory_bandwidth_Bps * device.memory_efficiency);
    const double efficiency = fitted_efficiency(fit, op);
    if (efficiency > 0) predicted /= efficiency;  // as device_time.cpp prices the op
    fit.kernels.push_back({"memory", op.op, fmt::format("{:.0f} elements", op.elements), op.dtype, op.seconds,
                           predicted, efficiency > 0 && op.bytes >= kStreamingBytes});
  }
}

}  // namespace

DeviceFit fit_device(const DeviceSpec& base, const KernelMeasurements& measured, const DeviceFitOptions& options) {
  DeviceFit fit;
  fit.device = base;
  const double host_bound = options.host_bound_floors * measured.launch_floor_s;
  const double gemm_host_bound = options.host_bound_floors * std::max(measured.launch_floor_s, measured.gemm_floor_s);
  if (options.sustained_matrix_flops > 0) set_sustained_rate(fit.device, options);
  fit_gemms(fit, measured, gemm_host_bound);
  fit_attention(fit, measured, options.attention_backend, host_bound);
  fit_memory(fit, measured, options.memory);
  share_f16(fit);
  price_every_kernel(fit, measured, options, host_bound, gemm_host_bound);
  return fit;
}

}  // namespace strata
