#pragma once
// The embedding's gradient added into the optimizer's fp32 gradient buffer after every micro-batch
// (`strata plan --embedding-grad-add on`), where gradient-accumulation fusion (`--accumulate fused`) covers only the
// linears: Megatron's fusion is inside the weight-gradient GEMMs (Transformer Engine's fuse_wgrad_accumulation,
// Megatron's LinearWithGradAccumulationAndAsyncCommunication), and the embedding is a lookup, not a GEMM.
// NeMo 24.05/24.09 as NVIDIA's DGX Cloud recipes run it (megatron_amp_O2, optim distributed_fused_adam,
// grad_sync_dtype bf16: llama3.1/llama3.1_8b.yaml, llama3.1_70b.yaml, nemo_megatron/gpt3_175b_hydra.yaml at
// NVIDIA/dgxc-benchmarking 35a9aec), read at NVIDIA/NeMo r2.0.0rc1 and apex 810ffae (its Dockerfile.ci's APEX_TAG):
// - megatron_gpt_model.py configure_optimizers marks the word (and position) embeddings `_with_fp32_optimizer`;
//   core/optim/distributed_adam.py init_params_bucket gives those parameters buckets with grad_sync_dtype fp32, so
//   a bf16 parameter's gradient cannot be a view of its bucket (apex's zero_grad makes param.grad a view only when
//   the dtypes match);
// - each micro-batch's backward makes the embedding's whole dense gradient (F.embedding's backward, Megatron-Core's
//   VocabParallelEmbedding outside deterministic mode: the [V/tp, C] table, priced with the embedding's backward);
// - fwd_bwd_step runs the micro-batches under no_sync(greedy_grad_copy = megatron_amp_O2 = true), so the
//   post-backward hook calls apex's DistributedFusedAdam._grad_copy on every micro-batch: grad_out.add_(grad_in),
//   the bucket's fp32 slice plus the bf16 gradient, then param.grad = None.
// Priced per element of the embedding a rank holds (V/tp rows, and the learned positions where the model has them),
// once a micro-batch on the first pipeline stage: the gradient read (a bytes), the fp32 bucket read and written
// (4 + 4), as a memory-bound op of its own. Under `--accumulate separate` every gradient's accumulation is already
// priced (cost_model.cpp accumulate_seconds), so nothing is added there. Time only; the per-step zeroing of the
// gradient buffer is not priced.
#include "core/dtype.h"
#include "planner/workload.h"

namespace strata {

// Bytes one element of the embedding's gradient moves when added into an fp32 buffer, with gradients of `dtype`.
double embedding_grad_add_bytes(DType dtype);

// Appends that addition to the embedding segment's backward, over the parameters the segment holds.
void add_embedding_grad_add(SegmentWork& embedding, DType dtype);

}  // namespace strata
