// The keys' and values' exchange of context parallelism, per layer and micro-batch. Every rank holds two of the
// sequence's 2·cp chunks and runs its attention as cp steps of equal work (workload.h's run_attention_over_ring),
// a step's block taking 1/cp of the attention op's time; a transfer running beside a block shows only what it
// takes beyond it.
#include "planner/context_parallel_exchange.h"

#include <algorithm>

#include "planner/comm_pricer.h"
#include "planner/cost_model.h"

namespace strata {

namespace {

// The bytes of one rank's keys and values for an attention op of the device's work, in `element_bytes` each: its
// (row, head) problems hold the query heads, of which `heads_sent / n_head` have keys and values sent.
double key_value_block_bytes(const OpWork& attention, double heads_sent_per_head, double element_bytes) {
  const AttentionShape& shape = attention.attention;
  return 2.0 * static_cast<double>(shape.problems) * heads_sent_per_head * static_cast<double>(shape.seq) *
         static_cast<double>(shape.head_dim) * element_bytes;
}

// One message from every rank to the next at once: the step waits for the slower of the hop between neighbours
// and the hop from the last rank back to the first.
double neighbour_transfer(const CommInput& input, double bytes) {
  return std::max(input.pricer.point_to_point(bytes, input.stride),
                  input.pricer.point_to_point(bytes, (input.degree - 1) * input.stride));
}

// Transformer Engine's ring (AttnFuncWithCPAndKVP2P): the K/V block of the key/value heads, in the compute dtype,
// to the next rank before each step but the last, beside that step's block; backward the K/V block first, the
// dK/dV block last and both at once between.
KeyValueExchange transformer_engine_ring(const CommInput& input) {
  const int cp = input.degree;
  const double kv_heads_per_head =
      static_cast<double>(input.problem.model.kv_heads()) / static_cast<double>(input.problem.model.n_head);
  const double element_bytes = static_cast<double>(dtype_size(input.problem.dtype));
  KeyValueExchange ring;
  const double steps_sending = cp - 1;
  for (const OpWork& op : input.layer_work->forward) {
    if (op.kind != OpKind::Attention) continue;
    const double block = input.op_seconds(op) / cp;
    const double kv = neighbour_transfer(input, key_value_block_bytes(op, kv_heads_per_head, element_bytes));
    ring.forward_transfers += steps_sending * kv;
    ring.exposed.forward += steps_sending * std::max(0.0, kv - block);
    ring.redone_selectively = op.selective_recompute;
    if (op.selective_recompute) ring.exposed.selective = ring.exposed.forward;
  }
  for (const OpWork& op : input.layer_work->backward) {
    if (op.kind != OpKind::Attention) continue;
    const double block = input.op_seconds(op) / cp, bytes = key_value_block_bytes(op, kv_heads_per_head, element_bytes);
    const double one = neighbour_transfer(input, bytes), both = neighbour_transfer(input, 2 * bytes), between = cp - 2;
    ring.backward_transfers += 2 * one + between * both;
    ring.exposed.backward += 2 * std::max(0.0, one - block) + between * std::max(0.0, both - block);
  }
  return ring;
}

// PyTorch's context_parallel (_templated_ring_attention and its backward). The K/V it exchanges are what SDPA is
// given: every query head's (torchtitan expands the key/value heads before the call), in the compute dtype. Before
// the first step's block each rank starts the rotation; the all-gather fetches every rank's block at once (waited
// for before the second step: it runs beside the first block only), the all-to-all sends the block to the next rank
// before each step but the last (each beside its step's block). Backward the K/V are rotated again the same way,
// and the K/V gradients, accumulated in fp32, go to the next rank after every step (cp times, by all-to-all),
// each beside the next step's block (after the all-to-all's K/V of that step on the same stream), the last waited
// for with nothing beside it.
KeyValueExchange torch_rotation(const CommInput& input, bool all_gather) {
  const int cp = input.degree;
  const double element_bytes = static_cast<double>(dtype_size(input.problem.dtype));
  KeyValueExchange rotation;
  // A pass's K/V rotation for one rank's block of `bytes` beside steps of `block` seconds: its transfers' seconds,
  // what runs past the blocks added to `exposed`.
  auto key_values = [&](double bytes, double block, double& exposed) {
    if (all_gather) {
      const double gather = input.pricer.collective(comm::Collective::AllGather, cp * bytes, cp, input.stride,
                                                    input.problem.dtype);
      exposed += std::max(0.0, gather - block);
      return gather;
    }
    const double kv = neighbour_transfer(input, bytes);
    exposed += (cp - 1) * std::max(0.0, kv - block);
    return (cp - 1) * kv;
  };
  for (const OpWork& op : input.layer_work->forward) {
    if (op.kind != OpKind::Attention) continue;
    const double block = input.op_seconds(op) / cp;
    rotation.forward_transfers += key_values(key_value_block_bytes(op, 1.0, element_bytes), block,
                                             rotation.exposed.forward);
    rotation.redone_selectively = op.selective_recompute;
    if (op.selective_recompute) rotation.exposed.selective = rotation.exposed.forward;
  }
  for (const OpWork& op : input.layer_work->backward) {
    if (op.kind != OpKind::Attention) continue;
    const double block = input.op_seconds(op) / cp, bytes = key_value_block_bytes(op, 1.0, element_bytes);
    const double gradients = neighbour_transfer(input, key_value_block_bytes(op, 1.0, 4.0));
    rotation.backward_transfers += cp * gradients;
    if (all_gather) {
      // The gather beside the first block, each step's gradients beside the next block, the last's alone.
      rotation.backward_transfers += key_values(bytes, block, rotation.exposed.backward);
      rotation.exposed.backward += (cp - 1) * std::max(0.0, gradients - block) + gradients;
      continue;
    }
    // The first block hides the first K/V; a block between, the gradients before it and its K/V; the last block,
    // the gradients before it; the last gradients show whole.
    const double kv = neighbour_transfer(input, bytes);
    rotation.backward_transfers += (cp - 1) * kv;
    rotation.exposed.backward += std::max(0.0, kv - block) + (cp - 2) * std::max(0.0, kv + gradients - block) +
                                 std::max(0.0, gradients - block) + gradients;
  }
  return rotation;
}

}  // namespace

KeyValueExchange key_value_exchange(const CommInput& input, ContextParallelExchange exchange) {
  if (input.degree == 1 || input.layer_work == nullptr) return {};
  switch (exchange) {
    case ContextParallelExchange::Ring: return transformer_engine_ring(input);
    case ContextParallelExchange::AllGather: return torch_rotation(input, true);
    case ContextParallelExchange::AllToAll: return torch_rotation(input, false);
  }
  return {};
}

}  // namespace strata
