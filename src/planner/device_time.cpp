#include "planner/device_time.h"

#include <algorithm>

namespace strata {

double op_seconds(const OpWork& op, const DeviceSpec& device, DType dtype, double scale) {
  const DTypePerformance& perf = device.performance(dtype);
  double flops = op.flops * scale;
  double bytes = op.bytes * scale;
  double arithmetic_Fps = perf.vector_flops;
  if (op.kind != OpKind::Other && !(perf.matrix_flops > 0)) {
    fail("device '{}' has no matrix figures for {}: {} cannot be priced in it", device.name, dtype_name(dtype), op.op);
  }
  if (op.kind == OpKind::Gemm) arithmetic_Fps = perf.matrix_flops * perf.gemm.at(flops);
  if (op.kind == OpKind::Attention) {
    arithmetic_Fps = perf.matrix_flops * perf.attention.at(flops / std::max(1.0, op.attention_problems));
  }
  double compute_s = flops / arithmetic_Fps;
  double memory_s = bytes / (device.memory_bandwidth_Bps * device.memory_efficiency);
  double seconds = device.op_overhead_s + std::max(compute_s, memory_s);
  auto found = perf.op_efficiency.find(op.op);
  return found == perf.op_efficiency.end() ? seconds : seconds / found->second;
}

}  // namespace strata
