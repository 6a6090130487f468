#pragma once
// The copies PyTorch's FSDP makes around its collectives, per unit and micro-batch, for a ZeRO-3 run that uses it
// (`strata plan --fsdp 1|2`). They are memory-bound kernels beside the unit's own, read from PyTorch's code:
//
// FSDP1 (FullyShardedDataParallel, one FlatParameter per unit; torch/distributed/fsdp: _runtime_utils.py
// _pre_unshard / _post_backward_hook, flat_param.py, and algorithms/_comm_hooks/default_hooks.py, torch 2.0-2.1):
// - before each all-gather, mixed precision copies the fp32 shard into the low-precision shard;
// - the unit's parameters are views of the gathered flat parameter made by torch.split, so autograd's backward of
//   split concatenates their gradients into one flat gradient; that is cast to the reduce dtype (fp32), divided in
//   place by the pre-divide factor before the reduce-scatter, and the reduced shard by the post-divide factor.
// FSDP2 (fully_shard; torch/distributed/_composable/fsdp/_fsdp_collectives.py, torch 2.4-2.6):
// - before each all-gather, the shards are cast to the parameter dtype and copied into the all-gather input
//   (_get_param_all_gather_inputs, foreach copies); after it, the gathered unit is copied out into the parameters'
//   own tensors on the compute stream (foreach_all_gather_copy_out, split_with_sizes_copy);
// - the gradients are copied, cast to the reduce dtype, into the reduce-scatter input
//   (foreach_reduce_scatter_copy_in); fp32 and bf16 are averaged by NCCL, with no division kernel.
// Gradients are reduced in `reduce_dtype`: fp32 (FSDP2 as torchtitan runs it, Composer's DEFAULT mixed precision) or
// the compute dtype (Composer's PURE: composer/trainer/mosaic_fsdp_utils.py get_mixed_precision sets reduce_dtype to
// the precision's dtype), in which FSDP1's cast of the gradients is a no-op, the divisions run in that dtype and the
// reduced shard is cast to the fp32 shard's dtype (_cast_grad_to_param_dtype). The copies that run on FSDP's own
// streams are priced as if they ran between the unit's kernels (assumption: they take the compute units those kernels
// would run on for as long as they stream memory).
#include <string>
#include <vector>

#include "core/dtype.h"
#include "planner/workload.h"

namespace strata {

enum class FsdpRuntime {
  None,   // the collectives only (no runtime described)
  Fsdp1,  // FullyShardedDataParallel, FlatParameter (Composer, llm-foundry)
  Fsdp2,  // fully_shard, per-parameter (torchtitan)
};
FsdpRuntime parse_fsdp_runtime(const std::string& text, const std::string& what);

// A unit's copies in one micro-batch: with each all-gather (a layer is gathered once in forward and again in
// backward, the root unit once), and after its backward (the gradients into the reduce-scatter).
struct FsdpUnitCopies {
  std::vector<OpWork> per_gather;
  std::vector<OpWork> per_backward;
};

// A unit of `params` parameters on this device before sharding, sharded over `shards` ranks, its weights computed
// in `param_dtype` with fp32 master weights, its gradients reduce-scattered in `reduce_dtype`; gathered at
// `gather_width` bytes per parameter when given (float8 linears' weights gathered in fp8, fp8_linears.h: the cast
// before the gather writes, and the copies around it move, that many), else param_dtype's.
FsdpUnitCopies fsdp_unit_copies(FsdpRuntime runtime, double params, int shards, DType param_dtype, DType reduce_dtype,
                                double gather_width = 0);

}  // namespace strata
