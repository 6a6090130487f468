// Context parallelism in the planner, as Megatron-Core runs it (context_parallel_size) through Transformer
// Engine's attention, or as PyTorch's context_parallel runs it (torchtitan's): every sequence cut into 2·cp
// chunks, rank i holding chunks i and 2·cp−1−i so that each rank's share of the causal mask's work is the same;
// every token-wise op on the rank's seq/cp positions; the keys and values exchanged between the cp ranks beside
// the attention blocks, by the plan's exchange (context_parallel_exchange.h: Transformer Engine's ring, the
// default, or torch's all-gather or all-to-all rotation), so only what a transfer takes beyond the blocks it runs
// with is priced; the weights replicated over cp, their gradients reduced and ZeRO's shards taken over dp × cp.
// Strata's runtime does not execute it: it is priced at the degree `strata plan --cp N` fixes, for plans of
// other runtimes, and never proposed by the search.
#include <fmt/format.h>

#include <iterator>

#include "core/error.h"
#include "parallel/parallel_dimension.h"
#include "planner/context_parallel_exchange.h"
#include "planner/cost_model.h"
#include "planner/plan_dimension.h"
#include "planner/search.h"

namespace strata {

namespace {

// Where its option is held in a plan (DimensionOptionValues): the exchange, 0 (the ring) by default.
size_t position() {
  static const size_t context = dimension_position("cp");  // a built-in's position never changes
  return context;
}
constexpr size_t kExchange = 0;

constexpr std::string_view kExchangeNames[] = {"ring", "allgather", "alltoall"};

std::string_view exchange_name(ContextParallelExchange exchange) { return kExchangeNames[static_cast<int>(exchange)]; }

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

// Why the plan's context parallelism cannot be priced: its sequence split, or an exchange without a group.
std::optional<std::string> context_parallel_refused(const PlanningProblem& problem, const ParallelPlan& plan) {
  const int degree = plan.degree("cp");
  if (degree == 1 && context_parallel_exchange(plan) != ContextParallelExchange::Ring) {
    return fmt::format("the context-parallel exchange {} needs context parallelism > 1 (--cp N)",
                       exchange_name(context_parallel_exchange(plan)));
  }
  return sequence_not_split(problem, degree);
}

// The exchange the user fixed (the ring unless told): the runtime's, not a choice the search makes.
void exchange_options(const ParallelPlan& plan, const OptionSearch& search, const EmitPlan& emit) {
  ParallelPlan option = plan;
  set_context_parallel_exchange(option, fixed_context_parallel_exchange(search.limits).value_or(
                                            ContextParallelExchange::Ring));
  emit(option);
}

void fix_exchange_flag(const std::string& value, PlanLimits& limits) {
  for (int exchange = 0; exchange < static_cast<int>(std::size(kExchangeNames)); ++exchange) {
    if (value == kExchangeNames[exchange]) {
      fix_context_parallel_exchange(limits, static_cast<ContextParallelExchange>(exchange));
      return;
    }
  }
  fail("--cp-exchange must be ring, allgather or alltoall, got '{}'", value);
}

MicroBatchComm context_parallel_comm(const CommInput& input) {
  MicroBatchComm comm;
  comm.layer = key_value_exchange(input, context_parallel_exchange(input.plan)).exposed;
  return comm;
}

std::string_view term_name(ContextParallelExchange exchange) {
  switch (exchange) {
    case ContextParallelExchange::AllGather: return "context-parallel K/V all-gather (torch)";
    case ContextParallelExchange::AllToAll: return "context-parallel K/V all-to-all (torch)";
    case ContextParallelExchange::Ring: break;
  }
  return "context-parallel K/V ring";
}

// The stage's exchange over the step: what runs past the attention blocks, and all the transfers it hides.
std::vector<ExplainTerm> context_parallel_terms(const StageCommInput& input) {
  const CommInput& comm = input.comm;
  if (comm.degree == 1) return {};
  const ContextParallelExchange kind = context_parallel_exchange(comm.plan);
  const KeyValueExchange exchange = key_value_exchange(comm, kind);
  const double per_layer = static_cast<double>(comm.plan.micro_batches) * input.layers;
  const bool selective = comm.plan.recompute == RecomputeMode::Selective;
  const double forwards =
      comm.plan.recompute == RecomputeMode::Full || (selective && exchange.redone_selectively) ? 2 : 1;
  const double exposed = per_layer * (forwards * exchange.exposed.forward + exchange.exposed.backward);
  const double transfers = per_layer * (forwards * exchange.forward_transfers + exchange.backward_transfers);
  return {{std::string(term_name(kind)), exposed,
           fmt::format("past the attention blocks; {:.4f} s of transfers in all, cp={} ranks {} apart", transfers,
                       comm.degree, comm.stride)}};
}

}  // namespace

ContextParallelExchange context_parallel_exchange(const ParallelPlan& plan) {
  return static_cast<ContextParallelExchange>(plan.options.at(position(), kExchange));
}

void set_context_parallel_exchange(ParallelPlan& plan, ContextParallelExchange exchange) {
  plan.options.set_at(position(), kExchange, static_cast<int>(exchange));
}

std::optional<ContextParallelExchange> fixed_context_parallel_exchange(const PlanLimits& limits) {
  const int fixed = limits.fixed_options.at(position(), kExchange);
  if (fixed == DimensionOptionValues::kOpen) return std::nullopt;
  return static_cast<ContextParallelExchange>(fixed);
}

void fix_context_parallel_exchange(PlanLimits& limits, ContextParallelExchange exchange) {
  limits.fixed_options.set_at(position(), kExchange, static_cast<int>(exchange));
}

const std::vector<ParallelDimension>& priced_only_dimensions() {
  // Megatron-Core's rank order puts cp right outside tp (tp-cp-ep-dp-pp): nesting 0 as tp's, after it. torchtitan's
  // mesh (pp, dp_replicate, dp_shard, cp, tp) nests it the same way.
  static const std::vector<ParallelDimension> dimensions = {
      ParallelDimension{.name = "cp", .nesting = 0, .named_when_set_only = true}};
  return dimensions;
}

PlannerDimension context_parallel_planning() {
  return {.name = "cp",
          .parallelism = "context",
          .fix_help = "Price context parallelism of this degree, as Megatron-Core with Transformer Engine runs it, or "
                      "PyTorch's context_parallel with --cp-exchange (Strata's runtime does not execute it; the "
                      "search never proposes it)",
          .runtime_executes = false,
          .refuse_fixed = sequence_not_split,
          .refuse_plan = context_parallel_refused,
          .options = exchange_options,
          .describe_options =
              [](const ParallelPlan& plan) {
                const ContextParallelExchange exchange = context_parallel_exchange(plan);
                return exchange == ContextParallelExchange::Ring ? std::string()
                                                                 : fmt::format("cp-{}", exchange_name(exchange));
              },
          .options_json =
              [](const ParallelPlan& plan, nlohmann::json& json) {
                const ContextParallelExchange exchange = context_parallel_exchange(plan);
                if (exchange != ContextParallelExchange::Ring) json["cp_exchange"] = std::string(exchange_name(exchange));
              },
          .option_flags = {{"cp-exchange",
                            "How context parallelism's keys and values reach every rank: ring (Transformer Engine's "
                            "point-to-point ring, the default), allgather or alltoall (PyTorch's context_parallel "
                            "rotate methods, torchtitan's context_parallel_rotate_method)",
                            fix_exchange_flag}},
          .micro_batch_comm = context_parallel_comm,
          .explain_comm = context_parallel_terms,
          .comm_name = "context-parallel K/V exchange",
          .splits_sequence = true,
          .replicates_weights = true};
}

}  // namespace strata
