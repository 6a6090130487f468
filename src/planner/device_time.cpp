#include "planner/device_time.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace strata {

namespace {

double ceil_div(double a, double b) { return std::ceil(a / b); }
double round_up(double a, double step) { return ceil_div(a, step) * step; }

double roofline(double compute_s, double bytes, const DeviceSpec& device) {
  return device.op_overhead_s + std::max(compute_s, bytes / (device.memory_bandwidth_Bps * device.memory_efficiency));
}

double gemm_bytes(const GemmShape& s, DType dtype) {
  return static_cast<double>(s.batch) * static_cast<double>(s.m * s.k + s.k * s.n + s.m * s.n) *
         static_cast<double>(dtype_size(dtype));
}

// Megatron's unfused attention: scores = q k^T and context = p v as batched
// GEMMs over every (batch row, head), the whole [s, s] square (no causal
// skipping), and a fused scale-mask-softmax reading the scores and writing the
// probabilities; backward: four GEMMs and the softmax's gradient (reading the
// probabilities and their gradient, writing the scores' gradient).
double unfused_attention_seconds(const AttentionShape& a, const DeviceSpec& device, DType dtype) {
  const double scores = gemm_seconds({a.problems, a.seq, a.seq, a.head_dim}, device, dtype);
  const double context = gemm_seconds({a.problems, a.seq, a.head_dim, a.seq}, device, dtype);
  const double square =
      static_cast<double>(a.problems) * static_cast<double>(a.seq * a.seq) * static_cast<double>(dtype_size(dtype));
  if (!a.backward) return scores + context + roofline(0, 2 * square, device);
  return scores + 3 * context + roofline(0, 3 * square, device);
}

}  // namespace

AttentionKernel parse_attention_kernel(const std::string& text, const std::string& what) {
  if (text == "fused") return AttentionKernel::Fused;
  if (text == "unfused") return AttentionKernel::Unfused;
  fail("{} must be fused or unfused, got '{}'", what, text);
}

const char* attention_kernel_name(AttentionKernel kernel) {
  return kernel == AttentionKernel::Fused ? "fused" : "unfused";
}

double gemm_compute_seconds(const GemmShape& s, const DTypePerformance& perf) {
  const GemmEngine& engine = perf.gemm;
  STRATA_CHECK(!engine.tiles.empty(), "a GEMM engine without tiles");
  const double units = engine.compute_units;
  const double unit_peak = perf.matrix_flops / units * engine.alignment_efficiency(s.n, s.k);
  const double k = round_up(static_cast<double>(s.k), static_cast<double>(engine.k_step));
  double best = std::numeric_limits<double>::infinity();
  for (const GemmTile& tile : engine.tiles) {
    const double rows = static_cast<double>(tile.rows), columns = static_cast<double>(tile.columns);
    const double tiles = static_cast<double>(s.batch) * ceil_div(static_cast<double>(s.m), rows) *
                         ceil_div(static_cast<double>(s.n), columns);
    const double per_tile = 2 * rows * columns * k / (unit_peak * tile.efficiency) + engine.tile_overhead_s;
    best = std::min(best, ceil_div(tiles, units) * per_tile);
  }
  if (perf.sustained_matrix_flops > 0) {
    const double flops = 2 * static_cast<double>(s.batch) * static_cast<double>(s.m) * static_cast<double>(s.n) *
                         static_cast<double>(s.k);
    best = std::max(best, flops / perf.sustained_matrix_flops);
  }
  return best;
}

double fused_attention_compute_seconds(const AttentionShape& a, double flops, const DTypePerformance& perf) {
  const AttentionEngine& engine = perf.attention;
  const double units = perf.gemm.compute_units;
  const double head_dim = static_cast<double>(a.head_dim);
  const std::optional<int64_t> kernel = engine.kernel_head_dim(a.head_dim);
  if (!kernel) fail("the fused attention has no kernel for head dim {}", a.head_dim);  // CostModel refuses it first
  const double padded = static_cast<double>(*kernel);
  const double tiles = static_cast<double>(a.problems) * ceil_div(static_cast<double>(a.seq), static_cast<double>(engine.block_rows));
  const double efficiency = a.backward ? engine.backward_efficiency : engine.forward_efficiency;
  // Each ring step is a kernel of its own over the same tiles, doing its share of the FLOPs.
  const double steps = static_cast<double>(a.ring_steps);
  const double per_tile =
      flops / steps * (padded / head_dim) / tiles / (perf.matrix_flops / units * efficiency) + engine.tile_overhead_s;
  return steps * ceil_div(tiles, units) * per_tile;
}

double gemm_seconds(const GemmShape& shape, const DeviceSpec& device, DType dtype) {
  return roofline(gemm_compute_seconds(shape, device.performance(dtype)), gemm_bytes(shape, dtype), device);
}

double op_seconds(const OpWork& op, const DeviceSpec& device, DType dtype, double scale, AttentionKernel attention) {
  // A float8 linear's GEMM runs on the float8 engine (fp8_linears.h); everything else in the compute dtype.
  const DTypePerformance& perf = op.fp8 ? device.fp8_performance() : device.performance(dtype);
  if (op.kind != OpKind::Other && !(perf.matrix_flops > 0)) {
    fail("device '{}' has no matrix figures for {}: {} cannot be priced in it", device.name, dtype_name(dtype), op.op);
  }
  double seconds = 0;
  if (op.kind == OpKind::Gemm) {
    GemmShape shape = op.gemm;
    shape.m = static_cast<int64_t>(std::ceil(static_cast<double>(shape.m) * scale));
    seconds = roofline(gemm_compute_seconds(shape, perf), op.bytes * scale, device);
  } else if (op.kind == OpKind::Attention && attention == AttentionKernel::Unfused) {
    seconds = unfused_attention_seconds(op.attention, device, dtype);
  } else if (op.kind == OpKind::Attention) {
    seconds = roofline(fused_attention_compute_seconds(op.attention, op.flops, perf), op.bytes, device);
    seconds += static_cast<double>(op.attention.ring_steps - 1) * device.op_overhead_s;  // a launch per ring step
  } else {
    seconds = roofline(op.flops * scale / perf.vector_flops, op.bytes * scale, device);
  }
  auto found = perf.op_efficiency.find(op.op);
  return found == perf.op_efficiency.end() ? seconds : seconds / found->second;
}

}  // namespace strata
