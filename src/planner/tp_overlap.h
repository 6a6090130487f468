#pragma once
// Sequence parallelism's all-gathers and reduce-scatters run chunk by chunk beside the GEMM next to them
// (`strata plan --tp-overlap`), as two runtimes do:
// - `userbuffers`: Transformer Engine's Userbuffers overlap (`ub_tp_comm_overlap`, initialize_ub in
//   transformer_engine/pytorch/module/base.py). Per linear of a layer: the forward all-gather feeding a
//   column-parallel GEMM (qkv_fprop, fc1_fprop) and the backward all-gather feeding a row-parallel input
//   gradient (proj_dgrad, fc2_dgrad) by ring exchange, one shard per step beside that shard's GEMM; the forward
//   reduce-scatter of a row-parallel GEMM (proj_fprop, fc2_fprop) pipelined in `num_splits` chunks, each
//   chunk's reduce-scatter beside the next chunk's GEMM; the backward reduce-scatter of a column-parallel
//   input gradient in bulk beside that linear's weight-gradient GEMM (qkv_wgrad, fc1_wgrad). The communication
//   kernels hold `num_sm` compute units (the run's ub config; TE's defaults: 1 for ring exchange, 16 else),
//   which the GEMM beside them runs without.
// - `async-tp`: PyTorch's micro-pipelined tensor parallelism (torch.distributed._symmetric_memory's fused
//   all-gather-matmul and matmul-reduce-scatter, which torch.compile's micro_pipeline_tp pass puts in for
//   every all-gather feeding a matmul and every matmul feeding a reduce-scatter, forward and backward): each
//   pipelined over the tp ranks' shards, the copies on the copy engines (no compute units taken).
// A backward GEMM is priced as its forward linear's (the same FLOPs, its operands transposed).
#include <map>
#include <string>
#include <vector>

#include "planner/model_comm.h"

namespace strata {

enum class TpOverlapRuntime { None, Userbuffers, AsyncTp };

struct TpOverlap {
  TpOverlapRuntime runtime = TpOverlapRuntime::None;
  // Userbuffers: compute units each overlap's communication kernels take, by Transformer Engine's GEMM
  // name (qkv_fprop, proj_fprop, fc1_fprop, fc2_fprop, proj_dgrad, fc2_dgrad, qkv_wgrad, fc1_wgrad); a
  // name not given takes TE's default.
  std::map<std::string, int> comm_units;
  int pipeline_splits = 4;  // Userbuffers' pipelined reduce-scatter's chunks (TE's default num_splits)
};

// `--tp-overlap` (none, userbuffers, async-tp) and `--ub-comm-sms` (`NAME=N,...`, userbuffers only);
// fails naming the flag and the value it cannot take.
TpOverlap parse_tp_overlap(const std::string& runtime, const std::string& comm_units);

// Compute units Userbuffers' communication takes beside the named GEMM.
int userbuffers_comm_units(const TpOverlap& overlap, const std::string& gemm);

// One GEMM beside a collective, as a chunked schedule runs them (all seconds): the whole's time with the
// GEMM already slowed by the compute units the communication takes.
double ring_exchange_seconds(double gemm, double collective, int ranks);    // ranks steps, ranks-1 transfers
double pipelined_seconds(double gemm, double collective, int splits);      // the last chunk's transfer after
double bulk_seconds(double gemm, double collective);                       // side by side, whole
double with_units_taken(double gemm, int units_taken, int compute_units);  // the GEMM on fewer units

// A layer's sequence-parallel collectives as one runtime overlaps them: what each call of `calls` adds to
// the layer's time beyond its GEMM (forward: calls in graph order; backward: the conjugates, in the reverse
// order). `linears` are the layer's linear GEMMs' forward seconds, those reading one value together, in
// forward order; `collective` prices one call exposed. Empty when the layer's collectives do not pair one to
// one with its linears as attention, MLP (a mixture of experts' extra gathers, per-linear entries): the
// caller prices them exposed.
struct OverlapInput {
  const TpOverlap& overlap;
  const std::vector<double>& linears;
  int ranks = 1;
  int compute_units = 1;
};
std::vector<double> overlapped_seconds(const OverlapInput& input, const std::vector<CommWork>& calls,
                                       const std::vector<double>& collective, bool backward);

}  // namespace strata
