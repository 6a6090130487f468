#pragma once
// A mixture of experts' work on one device under expert parallelism, beyond what the one-device graph
// says: the grouped GEMMs as the busiest rank runs them, the element-wise work between them over the
// receive buffer, and the all-to-all exchanges of the experts' rows over the expert-parallel group
// (parallel/expert_parallel.h).
//
// Each of the ep ranks holds E/ep experts and receives, on average, as many rows as its own tokens
// route (tokens·k): ep·tokens·k/E per expert. A grouped GEMM runs its experts' groups of rows one
// after another in one call, and the step waits for the slowest rank, so the planner prices each
// local expert at the busiest expert's rows: the mean times the user's imbalance factor (1: every
// expert gets its share; Switch Transformer and Mixtral runs see about 1.1-1.5 with a balancing loss).
#include <cstdint>
#include <vector>

#include "model/model_config.h"
#include "ops/schema.h"
#include "planner/workload.h"

namespace strata {

struct ExpertLoad {
  int64_t experts = 0;    // E
  int ep = 1;             // the expert-parallel degree
  double imbalance = 1;   // the busiest expert's rows over the mean
  // A group's rows are a multiple of this: the GEMM engine's widest alignment, to which MoE runtimes pad each
  // expert's rows (torchtitan's token-group alignment) so that the weight gradient's k stays aligned.
  int64_t row_alignment = 1;
};

// Parameters a token's forward pass uses: all of a dense model's; a mixture of experts' less the weights
// of the experts the router did not pick (E - k of every layer's).
double active_parameters(const ModelConfig& config);

// Whether `op` is an experts' grouped GEMM (forward, input gradient or weight gradient).
bool is_expert_gemm(const OpWork& op);

// Whether `op` is element-wise work on the experts' rows between their GEMMs (SwiGLU, forward and backward):
// under expert parallelism the runtime runs it over its whole receive buffer, sized for ep ranks' rows.
bool is_expert_elementwise(const OpWork& op);

// `op` (is_expert_gemm) as the busiest rank runs it: one GEMM per local expert (`gemm.batch` = E/ep),
// each with the busiest expert's rows, its FLOPs and the operands' bytes those make.
OpWork busiest_expert_gemm(const OpWork& op, const ExpertLoad& load, DType dtype);

// Rows of the busiest expert of a micro-batch whose permuted buffer has `rows` (tokens·k), rounded up to
// the row alignment.
double busiest_expert_rows(double rows, const ExpertLoad& load);

// The all-to-all calls of one MoE layer and micro-batch over the ep ranks, as the exchange ops'
// schemas count them (ops/expert_exchange.cpp): forward the dispatch and the return, backward their
// conjugates, each of the permuted buffer of `micro_batch`·`seq`·k rows of n_embd elements.
struct ExpertExchanges {
  std::vector<CommCall> forward;
  std::vector<CommCall> backward;
};
ExpertExchanges expert_exchanges(const ModelConfig& config, int64_t micro_batch, int64_t seq, DType dtype, int ep);

}  // namespace strata
