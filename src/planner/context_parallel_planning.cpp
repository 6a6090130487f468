// Context parallelism in the planner, as Megatron-Core runs it (context_parallel_size) through Transformer
// Engine's attention: every sequence cut into 2·cp chunks, rank i holding chunks i and 2·cp−1−i so that each
// rank's share of the causal mask's work is the same; every token-wise op on the rank's seq/cp positions; the
// keys and values passed around the cp ranks in a ring (forward: the K/V block, cp−1 times; backward: the K/V
// block and the dK/dV block, each cp−1 times), each step's transfer running beside that step's attention block,
// so only what a transfer takes beyond its block is priced; the weights replicated over cp, their gradients
// reduced and ZeRO's shards taken over dp × cp. Strata's runtime does not execute it: it is priced at the
// degree `strata plan --cp N` fixes, for plans of other runtimes, and never proposed by the search.
#include <fmt/format.h>

#include <algorithm>

#include "parallel/parallel_dimension.h"
#include "planner/comm_pricer.h"
#include "planner/cost_model.h"
#include "planner/plan_dimension.h"

namespace strata {

namespace {

// Why a sequence cannot be split `degree` ways as the runtimes that run context parallelism split it, or nothing.
std::optional<std::string> sequence_not_split(const PlanningProblem& problem, int degree) {
  if (degree == 1) return std::nullopt;
  if (problem.seq % (2 * degree) != 0) {
    return fmt::format(
        "context parallelism {} does not cut the sequence of {} tokens into {} equal chunks (two per rank, which "
        "balances the causal mask's work)",
        degree, problem.seq, 2 * degree);
  }
  if (problem.attention != AttentionKernel::Fused) {
    return fmt::format("context parallelism {} runs the fused attention only (Transformer Engine's ring), not "
                       "--attention unfused",
                       degree);
  }
  return std::nullopt;
}

// The bytes of one rank's keys and values for an attention op of the device's work: its (row, head) problems
// hold the query heads, of which kv_heads / n_head have keys and values of their own.
double key_value_block_bytes(const PlanningProblem& problem, const OpWork& attention) {
  const AttentionShape& shape = attention.attention;
  const double kv_heads_per_head =
      static_cast<double>(problem.model.kv_heads()) / static_cast<double>(problem.model.n_head);
  return 2.0 * static_cast<double>(shape.problems) * kv_heads_per_head * static_cast<double>(shape.seq) *
         static_cast<double>(shape.head_dim) * static_cast<double>(dtype_size(problem.dtype));
}

// One layer's ring per micro-batch: all its transfers, and what they take beyond the attention blocks they run
// beside; whether selective recomputation redoes the forward's (it redoes the attention core).
struct RingExchange {
  CommSeconds exposed;
  double forward_transfers = 0, backward_transfers = 0;
  bool redone_selectively = false;
};

RingExchange ring_exchange(const CommInput& input) {
  const int cp = input.degree;
  RingExchange ring;
  if (cp == 1 || input.layer_work == nullptr) return ring;
  // Every rank sends to the next and receives from the one before at once; the step waits for the slower of the
  // hop between neighbours and the hop from the last rank back to the first.
  auto transfer = [&](double bytes) {
    return std::max(input.pricer.point_to_point(bytes, input.stride),
                    input.pricer.point_to_point(bytes, (cp - 1) * input.stride));
  };
  const double steps_sending = cp - 1;
  for (const OpWork& op : input.layer_work->forward) {
    if (op.kind != OpKind::Attention) continue;
    const double block = input.op_seconds(op) / cp, kv = transfer(key_value_block_bytes(input.problem, op));
    ring.forward_transfers += steps_sending * kv;
    ring.exposed.forward += steps_sending * std::max(0.0, kv - block);
    ring.redone_selectively = op.selective_recompute;
    if (op.selective_recompute) ring.exposed.selective = ring.exposed.forward;
  }
  for (const OpWork& op : input.layer_work->backward) {
    if (op.kind != OpKind::Attention) continue;
    // The first step sends K/V on, the last dK/dV home, every step between both.
    const double block = input.op_seconds(op) / cp, bytes = key_value_block_bytes(input.problem, op);
    const double one = transfer(bytes), both = transfer(2 * bytes), between = cp - 2;
    ring.backward_transfers += 2 * one + between * both;
    ring.exposed.backward += 2 * std::max(0.0, one - block) + between * std::max(0.0, both - block);
  }
  return ring;
}

MicroBatchComm context_parallel_comm(const CommInput& input) {
  MicroBatchComm comm;
  comm.layer = ring_exchange(input).exposed;
  return comm;
}

// The stage's ring over the step: what runs past the attention blocks, and all the transfers it hides.
std::vector<ExplainTerm> context_parallel_terms(const StageCommInput& input) {
  const CommInput& comm = input.comm;
  if (comm.degree == 1) return {};
  const RingExchange ring = ring_exchange(comm);
  const double per_layer = static_cast<double>(comm.plan.micro_batches) * input.layers;
  const bool selective = comm.plan.recompute == RecomputeMode::Selective;
  const double forwards = comm.plan.recompute == RecomputeMode::Full || (selective && ring.redone_selectively) ? 2 : 1;
  const double exposed = per_layer * (forwards * ring.exposed.forward + ring.exposed.backward);
  const double transfers = per_layer * (forwards * ring.forward_transfers + ring.backward_transfers);
  return {{"context-parallel K/V ring", exposed,
           fmt::format("past the attention blocks; {:.4f} s of transfers in all, cp={} ranks {} apart", transfers,
                       comm.degree, comm.stride)}};
}

}  // namespace

const std::vector<ParallelDimension>& priced_only_dimensions() {
  // Megatron-Core's rank order puts cp right outside tp (tp-cp-ep-dp-pp): nesting 0 as tp's, after it.
  static const std::vector<ParallelDimension> dimensions = {
      ParallelDimension{.name = "cp", .nesting = 0, .named_when_set_only = true}};
  return dimensions;
}

PlannerDimension context_parallel_planning() {
  return {.name = "cp",
          .parallelism = "context",
          .fix_help = "Price context parallelism of this degree, as Megatron-Core with Transformer Engine runs it "
                      "(Strata's runtime does not execute it; the search never proposes it)",
          .runtime_executes = false,
          .refuse_fixed = sequence_not_split,
          .refuse_plan = [](const PlanningProblem& problem,
                            const ParallelPlan& plan) { return sequence_not_split(problem, plan.degree("cp")); },
          .micro_batch_comm = context_parallel_comm,
          .explain_comm = context_parallel_terms,
          .comm_name = "context-parallel K/V ring",
          .splits_sequence = true,
          .replicates_weights = true};
}

}  // namespace strata
