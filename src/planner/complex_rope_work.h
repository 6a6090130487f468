#pragma once
// torchtitan's rotary embedding under torch.compile (`strata plan --rope complex-eager`): complex arithmetic that
// Inductor does not generate code for, so the compiled block runs it as eager PyTorch would, where Strata's graph
// (and a real-valued rotary embedding under Inductor) runs one fused kernel reading q and k and writing them once.
// torchtitan's apply_rotary_emb (torchtitan/models/llama/model.py at pytorch/torchtitan 9dec370, lines 108-113; the
// same lines 155-160 of models/llama3/model.py at 820504e): view_as_complex(x.float().reshape(..., -1, 2)) times
// freqs_cis (complex64), view_as_real(...).flatten(3), .type_as(x). Inductor's lowering.py (every revision of 2023-25
// the code index holds, the late-2024 one around torch 1963fc8 included): fallback_node_due_to_unsupported_type
// sends any node with a complex input or output to the eager kernel ("Torchinductor does not support code generation
// for complex operators", pytorch/torchtitan#15 on this very model), except view.dtype/convert_element_type, and
// view_as_complex is `make_fallback(aten.view_as_complex, require_contiguous)`. So, for each of q and k:
// - forward: x.float() is an Inductor kernel of its own (its producer is the projection's extern GEMM, its only
//   reader the fallback, which needs it contiguous): a read, f written; view_as_complex a view; the complex product an
//   eager aten.mul: f read, f written (freqs_cis, a (seq, head_dim/2) table, is not counted); view_as_real and
//   flatten views; type_as an Inductor kernel: f read, a written (it also writes k's expansion, kv_repeat_work.h);
// - backward: autograd's mirror image: type_as's gradient cast to fp32 (a + f), the product's gradient an eager
//   complex product with conj(freqs_cis) (f + f), float()'s gradient cast back (f + a).
// These are the kernels eager PyTorch runs for the same lines (eager_work.h prices them under `--eager on`, which
// therefore takes no second copy of this). What this adds is their traffic beyond the fused kernel's (q and k read
// and written once each way): 4 fp32 passes an element each way, over the rank's q and k heads, as a memory-bound op
// beside the fused one: redone by selective recomputation when it is (torchtitan's per-op policy saves only matmul
// and SDPA outputs). Time only: the fp32 copies autograd keeps are not added to the activations, and the extra
// kernels' launches are not counted.
#include <cstdint>

#include "model/model_config.h"
#include "planner/eager_work.h"
#include "planner/workload.h"

namespace strata {

// Bytes an element of q or k moves beyond the fused rotary kernel, forward and backward, with activations of
// `activation_bytes` and the complex arithmetic in fp32.
EagerExtra complex_rope_extra(double activation_bytes);

// Adds that traffic to a layer with a rotary embedding (over the q and k heads a rank holds under tensor
// parallelism); a layer without one (GPT-2) is left as it is.
void add_complex_rope(SegmentWork& layer, const ModelConfig& config, int64_t micro_batch, int64_t seq, int tp,
                      DType dtype);

}  // namespace strata
