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
//   which the GEMM chunks beside them run without (each chunk its own cuBLAS GEMM on `_math_sms`, the
//   pipelined reduce-scatter's sum inside its userbuffers kernel: split_overlap_ag and split_overlap_rs,
//   transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp at NVIDIA/TransformerEngine d0067d0).
// - `async-tp`: PyTorch's micro-pipelined tensor parallelism, as torch.compile's micro_pipeline_tp pass puts
//   torch.distributed._symmetric_memory's fused ops in (pytorch/pytorch 5f65158, torch/_inductor/fx_passes/
//   micro_pipeline_tp.py; the ops at 006b161, torch/distributed/_symmetric_memory/__init__.py). An all-gather
//   whose result feeds matmuls as their left operand becomes fused_all_gather_matmul: forward before q/k/v and
//   gate/up, backward before the row-parallel linears' input-gradient GEMMs. A reduce-scatter whose input is one
//   matmul's output with no other user becomes fused_matmul_reduce_scatter: forward after the row-parallel
//   linears; backward only where one linear reads the gathered value, since with several (torchtitan's separate
//   wq, wk, wv and w1, w3 behind one PrepareModuleInput, pytorch/torchtitan 820504e,
//   torchtitan/models/llama3/parallelize_llama.py) the reduce-scatter's input is the sum of their input
//   gradients, no matmul, and the pass leaves it (`_find_producer_matmul` is None): that one stays exposed.
//   fused_all_gather_matmul (_pipelined_all_gather_and_consume): the local shard copied into the symmetric
//   buffer before anything starts (the code gives up overlapping it), then one shard's GEMMs per step, each
//   remote shard's copy on the copy engines beside the step before. fused_matmul_reduce_scatter
//   (_pipelined_produce_and_all2all, then reduce_partials): one chunk's GEMM per step, the peers pulling the
//   chunk before; then the ranks' partial sums added by one kernel after the last step.
// Each chunk's GEMMs are priced at the chunk's own shape (tile and wave quantisation, the launch per chunk), and
// the compute beside a transfer slows by the device's comm_compute_slowdown (Lee et al.), as the cost model prices
// every collective beside compute; Userbuffers' SMs taken are that contention made explicit, so a Userbuffers
// schedule pays the larger of the two.
// A backward GEMM is priced as its forward linear's (the same FLOPs, its operands transposed).
#include <functional>
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

// One schedule of GEMM chunks beside a collective's transfers (all seconds): its whole time, and the time a
// transfer runs beside a GEMM (what the device's comm_compute_slowdown applies to).
struct Schedule {
  double seconds = 0;
  double beside = 0;
};
// `chunk`: one chunk's GEMMs at the chunk's shape. Ring exchange: `ranks` chunks, `ranks`-1 transfers, each
// beside the next chunk; pipelined: `splits` chunks, each chunk's transfer beside the next, the last after them;
// bulk: the whole GEMM and the whole collective side by side.
Schedule ring_exchange(double chunk, double collective, int ranks);
Schedule pipelined(double chunk, double collective, int splits);
Schedule bulk(double gemm, double collective);
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
  const std::vector<int>& gemms;  // GEMMs in each of `linears` (q, k, v: 3)
  // One of `parts` equal row chunks of linear `linear`'s GEMMs, each GEMM at the chunk's shape.
  std::function<double(size_t linear, int parts)> chunk;
  // A kernel streaming `bytes` through device memory doing `adds` additions (a copy: none).
  std::function<double(double bytes, double adds)> memory;
  int ranks = 1;
  int compute_units = 1;
  double slowdown = 0;  // the device's comm_compute_slowdown
};
std::vector<double> overlapped_seconds(const OverlapInput& input, const std::vector<CommWork>& calls,
                                       const std::vector<double>& collective, bool backward);

}  // namespace strata
