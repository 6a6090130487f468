#pragma once
// The time of one op on a device. GEMMs: the output cut into the tiles the
// library picks among, the tiles run in waves over the compute units, each
// tile walking k in steps at its sustained fraction of the unit's peak plus a
// fixed cost (so a dimension one element past a tile boundary costs a row of
// tiles, and one tile past a full wave costs a wave); dimensions off the
// engine's alignment run slower. Fused attention likewise, in tiles of query
// rows per (batch row, head) with the head dim padded to the kernel's step;
// unfused attention as its batched GEMMs and the softmax over the scores in
// memory. Everything else: a roofline of vector arithmetic against memory
// traffic. A float8 linear's GEMM (OpWork::fp8) runs on the device's float8
// engine. Each op pays the launch overhead, and is divided by its measured
// (or described) efficiency relative to all this.
#include "planner/hardware.h"
#include "planner/workload.h"

namespace strata {

// How the run computes attention: one fused kernel (flash style, the scores
// never stored), or Megatron's unfused path (batched GEMMs, the [s, s] scores
// and probabilities in memory).
enum class AttentionKernel { Fused, Unfused };
AttentionKernel parse_attention_kernel(const std::string& text, const std::string& what);
const char* attention_kernel_name(AttentionKernel kernel);

// The arithmetic of a GEMM on the matrix engine, without launch or memory.
double gemm_compute_seconds(const GemmShape& shape, const DTypePerformance& perf);
// A GEMM's whole time: launch, then its arithmetic or its operands' memory traffic, whichever is longer.
double gemm_seconds(const GemmShape& shape, const DeviceSpec& device, DType dtype);
// The arithmetic of fused attention doing `flops` (as the op's schema counts them) on the matrix engine.
double fused_attention_compute_seconds(const AttentionShape& shape, double flops, const DTypePerformance& perf);

// `scale` shrinks the op's work (sequence parallelism splits residual-stream ops).
double op_seconds(const OpWork& op, const DeviceSpec& device, DType dtype, double scale = 1.0,
                  AttentionKernel attention = AttentionKernel::Fused);

}  // namespace strata
