#include "planner/workload.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "graph/autodiff.h"
#include "graph/memory_plan.h"
#include "model/family.h"
#include "model/graph_emitter.h"
#include "ops/placement_rule.h"
#include "parallel/tensor_parallel.h"

namespace strata {

namespace {

// A segment's own inputs (a layer's input, the tokens and targets) and the loss gradient's seed lie on the
// residual stream, with the ops the family names (model/family.h).
const std::set<std::string> kSegmentStream = {"x", "d_loss", "tokens", "targets"};

struct SegmentGraph {
  explicit SegmentGraph(const ModelConfig& config)
      : family(model_family(config)), stream(family.residual_stream()), sharding(family.sharding_plan()) {}
  // Whether the op (or value) of `label` lies on the residual stream: a listed gradient op, or a value or op,
  // forward or backward, under a listed forward label (its backward ops' labels extend it after ':' or ".grad_").
  bool on_residual_stream(const std::string& label) const {
    auto listed = [](const std::vector<std::string>& labels, const std::string& wanted) {
      return std::find(labels.begin(), labels.end(), wanted) != labels.end();
    };
    if (listed(stream.gradient_ops, label)) return true;
    const std::string base = forward_label(label);
    return kSegmentStream.count(base) != 0 || listed(stream.ops, base);
  }
  // Whether a value is rows of a mixture of experts' permuted buffer (model/moe/moe_block.h): made by the
  // token permutation, the experts' GEMMs and the activation between them, or their gradients (the weighted
  // combine's included); the weights' gradients are not rows, nor are the tokens' [batch, seq, C].
  static bool expert_rows(const Value& value) {
    const std::string base = forward_label(value.name);
    auto ends_with = [&](const std::string& suffix) {
      return base.size() >= suffix.size() && base.compare(base.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    const bool expert_op = base.find("experts.") != std::string::npos || ends_with("dispatch") || ends_with("combine");
    return expert_op && value.meta.shape.size() == 2;
  }
  // The forward op's label a value or op descends from (backward ops extend it after ':' or ".grad_").
  static std::string forward_label(const std::string& label) {
    const std::string base = label.substr(0, label.find(':'));
    return base.substr(0, base.find(".grad_"));
  }

  const ModelFamily& family;
  ResidualStream stream;
  ShardingPlan sharding;
  Graph graph;
  int forward_nodes = 0;
  std::set<int> params;
  std::set<int> activation_inputs;  // graph inputs other than params and the gradient seed
  int seed = -1;                    // the gradient arriving from the next segment
  bool recomputable = false;        // a transformer layer (the only segment recomputation applies to)
  std::set<int> read_whole;         // read_whole_by_backward's, once the graph is finished
};

// Per forward node, whether selective recomputation redoes it under `policy`.
std::vector<bool> selectively_recomputed(const SegmentGraph& segment, SelectivePolicy policy) {
  std::vector<bool> redone(static_cast<size_t>(segment.forward_nodes), false);
  if (!segment.recomputable) return redone;
  int gemms = 0;
  for (int id = 0; id < segment.forward_nodes; ++id) {
    const OpSchema& schema = OpRegistry::global().get(segment.graph.node(id).op);
    if (policy == SelectivePolicy::AttentionCore) {
      redone[static_cast<size_t>(id)] = schema.recomputed_selectively;
    } else {
      const bool kept_gemm = schema.kind == OpKind::Gemm && gemms++ % 2 == 0;
      redone[static_cast<size_t>(id)] = !kept_gemm && schema.kind != OpKind::Attention;
    }
  }
  return redone;
}

// Values the gradient of an op that reads every position (placement rule WholeSequence: a mixture of
// experts' router) reads: under sequence parallelism that op read them gathered whole, and its gradient reads
// that whole copy, so they are held whole even where they lie on the residual stream (the router's logits).
std::set<int> read_whole_by_backward(const SegmentGraph& segment) {
  const Graph& g = segment.graph;
  std::set<std::string> whole_ops;
  for (int id = 0; id < segment.forward_nodes; ++id) {
    const Node& node = g.node(id);
    if (OpRegistry::global().get(node.op).placement == PlacementRule::WholeSequence) whole_ops.insert(node.label);
  }
  std::set<int> read;
  for (int id = segment.forward_nodes; id < g.num_nodes(); ++id) {
    const Node& node = g.node(id);
    if (!whole_ops.count(SegmentGraph::forward_label(node.label))) continue;
    for (int input : node.inputs) {
      if (g.value(input).producer >= 0 && g.value(input).producer < segment.forward_nodes) read.insert(input);
    }
  }
  return read;
}

void add_bytes(const SegmentGraph& segment, ActivationBytes& total, int id) {
  const Value& value = segment.graph.value(id);
  double bytes = static_cast<double>(value.meta.nbytes());
  if (SegmentGraph::expert_rows(value)) {
    total.expert_rows += bytes;
  } else if (segment.read_whole.count(id)) {
    total.sharded += bytes;
  } else {
    (segment.on_residual_stream(value.name) ? total.residual : total.sharded) += bytes;
  }
}

// Values the backward pass reads that the forward pass made or was given.
std::set<int> read_by_backward(const SegmentGraph& segment) {
  const Graph& g = segment.graph;
  std::set<int> read;
  for (int id = segment.forward_nodes; id < g.num_nodes(); ++id) {
    for (int input : g.node(id).inputs) {
      if (segment.params.count(input)) continue;
      int producer = g.value(input).producer;
      bool from_forward = producer >= 0 ? producer < segment.forward_nodes : segment.activation_inputs.count(input);
      if (from_forward) read.insert(input);
    }
  }
  return read;
}

// Under selective recomputation a value made by a recomputed op is not kept;
// the op's own inputs are, so that it can run again.
std::set<int> kept_under_selective(const SegmentGraph& segment, const std::vector<bool>& redone, std::set<int> kept) {
  const Graph& g = segment.graph;
  bool changed = true;
  while (changed) {
    changed = false;
    for (int value : std::set<int>(kept)) {
      int producer = g.value(value).producer;
      if (producer < 0 || producer >= segment.forward_nodes || !redone[static_cast<size_t>(producer)]) continue;
      kept.erase(value);
      for (int input : g.node(producer).inputs) {
        // Parameters, and inputs every layer shares (the rotary positions), are not this layer's to keep.
        if (g.value(input).producer >= 0 || segment.activation_inputs.count(input)) kept.insert(input);
      }
      changed = true;
    }
  }
  return kept;
}

// The largest live set over the segment's run, split by stream, for a given
// sequence split (the peak moves when the residual part shrinks).
ActivationBytes peak_live(const SegmentGraph& segment, int sequence_split) {
  const Graph& g = segment.graph;
  MemoryPlan plan = plan_memory(g, {});
  std::vector<ActivationBytes> live(static_cast<size_t>(g.num_nodes()));
  auto add_lifetime = [&](int value, int first, int last) {
    for (int node = first; node <= last && node < g.num_nodes(); ++node) {
      add_bytes(segment, live[static_cast<size_t>(node)], value);
    }
  };
  for (int value = 0; value < g.num_values(); ++value) {
    if (plan.offsets[static_cast<size_t>(value)] >= 0) {
      const Lifetime& lifetime = plan.lifetimes[static_cast<size_t>(value)];
      // A value that took over its dying input's bytes adds none where it is produced.
      bool took_over = plan.takes_over[static_cast<size_t>(value)] >= 0;
      add_lifetime(value, took_over ? lifetime.first + 1 : lifetime.first, lifetime.last);
    } else if (segment.activation_inputs.count(value) || value == segment.seed) {
      int first = -1, last = -1;
      for (int node = 0; node < g.num_nodes(); ++node) {
        const auto& inputs = g.node(node).inputs;
        if (std::find(inputs.begin(), inputs.end(), value) == inputs.end()) continue;
        if (first < 0) first = node;
        last = node;
      }
      if (segment.activation_inputs.count(value)) first = 0;  // held from the start of the forward pass
      if (last >= 0) add_lifetime(value, first, last);
    }
  }
  ActivationBytes best;
  for (const ActivationBytes& at : live) {
    if (at.total(sequence_split) > best.total(sequence_split)) best = at;
  }
  return best;
}

SegmentWork summarise(const SegmentGraph& segment, SelectivePolicy policy) {
  const Graph& g = segment.graph;
  const std::vector<bool> redone = selectively_recomputed(segment, policy);
  SegmentWork work;
  for (int id = 0; id < g.num_nodes(); ++id) {
    const Node& node = g.node(id);
    bool forward = id < segment.forward_nodes;
    OpWork op = op_work(g, id);
    op.residual_stream = segment.on_residual_stream(node.label);
    op.selective_recompute = forward && redone[static_cast<size_t>(id)];
    (forward ? work.forward : work.backward).push_back(std::move(op));
  }
  for (int param : segment.params) {
    const Value& value = g.value(param);
    const double count = static_cast<double>(shape_numel(value.meta.shape));
    work.params += count;
    if (segment.family.stacked_over_experts(value.name)) work.expert_params += count;
  }

  std::set<int> kept = read_by_backward(segment);
  auto total = [&](const std::set<int>& values) {
    ActivationBytes bytes;
    for (int value : values) add_bytes(segment, bytes, value);
    return bytes;
  };
  work.saved[static_cast<size_t>(RecomputeMode::None)] = total(kept);
  if (segment.recomputable) {
    std::set<int> selective_kept = kept_under_selective(segment, redone, kept);
    if (policy == SelectivePolicy::AlternateGemms) {
      // PyTorch's selective checkpointing caches every output of the ops its policy saves, read later or not.
      for (int id = 0; id < segment.forward_nodes; ++id) {
        if (redone[static_cast<size_t>(id)]) continue;
        for (int output : g.node(id).outputs) selective_kept.insert(output);
      }
    }
    work.saved[static_cast<size_t>(RecomputeMode::Selective)] = total(selective_kept);
    work.saved[static_cast<size_t>(RecomputeMode::Full)] = total(segment.activation_inputs);
  } else {
    work.saved[static_cast<size_t>(RecomputeMode::Selective)] = work.saved[0];
    work.saved[static_cast<size_t>(RecomputeMode::Full)] = work.saved[0];
  }
  work.peak = peak_live(segment, 1);
  return work;
}

void finish(SegmentGraph& segment, int objective) {
  segment.forward_nodes = segment.graph.num_nodes();
  std::vector<int> wrt(segment.params.begin(), segment.params.end());
  for (int input : segment.activation_inputs) {
    if (is_floating(segment.graph.value(input).meta.dtype)) wrt.push_back(input);
  }
  segment.seed = add_backward(segment.graph, objective, wrt).seed;
  segment.read_whole = read_whole_by_backward(segment);
}

int add_activation(SegmentGraph& segment, const std::string& name, Shape shape, DType dtype) {
  int id = segment.graph.add_input(name, {std::move(shape), dtype});
  segment.activation_inputs.insert(id);
  return id;
}

// The token embedding's whole shape [V, C].
Shape table_shape(const ModelConfig& c) { return {c.vocab_size, c.n_embd}; }

// The part of parameter `name` (of `whole` shape) that one rank of a tensor-parallel group of `tp` holds, as the
// runtime's pass splits it (parallel/tensor_parallel.h) by the family's sharding plan: the last rank's, the
// largest where vocabulary shards differ by a row.
Shape held_by_a_rank(const ShardingPlan& sharding, const std::string& name, const Shape& whole, int tp) {
  const TensorParallelRank rank{.degree = tp, .rank = tp - 1};
  return ParameterShard(name, whole, sharding.rule_for(name), rank).shape();
}

// Builds the model's layers into the segment's graph (see model/family.h); each parameter the layers read
// becomes one of the segment's, once, with the shape a tensor-parallel rank holds. A layer's parameters are
// named without the layer prefix (`plan_prefix`), which the sharding plan's patterns carry.
GraphEmitter segment_emitter(SegmentGraph& segment, DType dtype, int tp, const std::string& plan_prefix = "") {
  auto param = [&segment, dtype, tp, plan_prefix](const std::string& name, const Shape& whole) {
    for (int id : segment.params) {
      if (segment.graph.value(id).name == name) return id;
    }
    int id = segment.graph.add_param(name, {held_by_a_rank(segment.sharding, plan_prefix + name, whole, tp), dtype});
    segment.params.insert(id);
    return id;
  };
  return GraphEmitter(segment.graph, PrecisionPolicy{}, param);
}

// One transformer block, with this device's shard of every tensor-parallel weight.
SegmentWork layer_work(const ModelConfig& c, int64_t b, int64_t s, int tp, DType dtype, SelectivePolicy selective) {
  SegmentGraph seg(c);
  seg.recomputable = true;
  int x = add_activation(seg, "x", {b, s, c.n_embd}, dtype);
  // The positions are one [s] input every layer shares (rotary reads them), not a layer's activation.
  int positions = seg.graph.add_input("positions", {{s}, DType::I32});
  GraphEmitter emit = segment_emitter(seg, dtype, tp, layer_prefix(c, 0));
  finish(seg, model_family(c).block(emit, c, x, positions, ""));
  return summarise(seg, selective);
}

SegmentWork embedding_work(const ModelConfig& c, int64_t b, int64_t s, int tp, DType dtype) {
  SegmentGraph seg(c);
  int tokens = add_activation(seg, "tokens", {b, s}, DType::I32);
  int positions = add_activation(seg, "positions", {s}, DType::I32);
  GraphEmitter emit = segment_emitter(seg, dtype, tp);
  finish(seg, model_family(c).embed(emit, c, tokens, positions));
  return summarise(seg, SelectivePolicy::AttentionCore);
}

// A tied LM head reads the embedding's weights; they are counted with the embedding.
SegmentWork head_work(const ModelConfig& c, int64_t b, int64_t s, int tp, DType dtype) {
  SegmentGraph seg(c);
  int x = add_activation(seg, "x", {b, s, c.n_embd}, dtype);
  int targets = add_activation(seg, "targets", {b, s}, DType::I32);
  GraphEmitter emit = segment_emitter(seg, dtype, tp);
  const ModelFamily& family = model_family(c);
  int logits = family.lm_head(emit, c, family.final_norm(emit, c, x));
  finish(seg, emit.op("cross_entropy", {logits, targets}, {}, "loss"));
  SegmentWork work = summarise(seg, SelectivePolicy::AttentionCore);
  const std::string tied = family.tied_embedding(c);
  if (!tied.empty()) {
    work.params -= static_cast<double>(shape_numel(held_by_a_rank(seg.sharding, tied, table_shape(c), tp)));
  }
  return work;
}

// What the memory planner holds, beyond the sum, while the two partial
// gradients of the tied table are summed; they die there, so the sum may take
// one over. Adds of parameters stand in for the ops that make the partials.
double tied_gradient_sum_extra(const TensorMeta& table) {
  Graph g;
  auto partial = [&](const std::string& name) {
    return g.apply1("add", {g.add_param(name + ".a", table), g.add_param(name + ".b", table)}, {}, name);
  };
  int sum = g.apply1("add", {partial("lm_head.grad"), partial("wte.grad")}, {}, "wte.grad_sum");
  return static_cast<double>(plan_memory(g, {sum}).arena_bytes) - static_cast<double>(table.nbytes());
}

}  // namespace

const OpWork* first_op_named(const std::vector<OpWork>& ops, const std::string& name) {
  for (const OpWork& op : ops) {
    if (op.op == name) return &op;
  }
  return nullptr;
}

OpWork op_work(const Graph& graph, int node_id) {
  const Node& node = graph.node(node_id);
  OpCost cost = graph.node_cost(node_id);
  const OpSchema& schema = OpRegistry::global().get(node.op);
  OpWork work{node.op, node.label, schema.kind, cost.flops, cost.bytes};
  if (work.kind == OpKind::Gemm) {
    // The output is [..., n] over m rows; its FLOPs are 2 m n k, plus at most an element-wise epilogue (a bias).
    const Shape& out = graph.value(node.outputs.at(0)).meta.shape;
    work.gemm.n = out.back();
    work.gemm.m = shape_numel(out) / work.gemm.n;
    work.gemm.k = static_cast<int64_t>(cost.flops / (2.0 * static_cast<double>(work.gemm.m * work.gemm.n)));
    work.gemm_input = node.inputs.at(0);
  }
  if (work.kind == OpKind::Attention) {
    // Attention ops read the queries as input "qkv" [B, T, 3C] (packed) or "q" [B, T, H·D].
    auto query_input = std::find_if(schema.inputs.begin(), schema.inputs.end(),
                                    [](const std::string& name) { return name == "qkv" || name == "q"; }) -
                       schema.inputs.begin();
    STRATA_CHECK(query_input < static_cast<std::ptrdiff_t>(schema.inputs.size()), "attention op {} reads no queries",
                 node.op);
    const std::string& name = schema.inputs[static_cast<size_t>(query_input)];
    const Shape& queries = graph.value(node.inputs[static_cast<size_t>(query_input)]).meta.shape;
    const int64_t heads = node.attrs.get_int("n_head");
    const int64_t width = name == "qkv" ? queries[2] / 3 : queries[2];
    work.attention = {queries[0] * heads, queries[1], width / heads, schema.differentiable == Differentiable::No};
  }
  return work;
}

SelectivePolicy parse_selective_policy(std::string_view text, std::string_view key) {
  if (text == "attention") return SelectivePolicy::AttentionCore;
  if (text == "alternate-gemms") return SelectivePolicy::AlternateGemms;
  fail("{} must be attention or alternate-gemms, got '{}'", key, text);
}

Workload build_workload(const ModelConfig& config, int64_t micro_batch, int64_t seq, int tp, DType dtype,
                        SelectivePolicy selective) {
  config.validate();
  if (tp < 1 || config.n_head % tp != 0 || config.kv_heads() % tp != 0) {
    fail("tensor-parallel degree {} must divide model.n_head ({}) and the key/value heads ({})", tp, config.n_head,
         config.kv_heads());
  }
  if (micro_batch < 1) fail("micro-batch size must be positive, got {}", micro_batch);
  if (seq < 1 || seq > config.block_size)
    fail("sequence length {} must be in [1, model.block_size = {}]", seq, config.block_size);
  Workload work;
  work.micro_batch = micro_batch;
  work.seq = seq;
  work.tp = tp;
  work.dtype = dtype;
  work.embedding = embedding_work(config, micro_batch, seq, tp, dtype);
  work.layer = layer_work(config, micro_batch, seq, tp, dtype, selective);
  work.head = head_work(config, micro_batch, seq, tp, dtype);
  const ModelFamily& family = model_family(config);
  const std::string tied = family.tied_embedding(config);
  if (!tied.empty()) {
    TensorMeta table{held_by_a_rank(family.sharding_plan(), tied, table_shape(config), tp), dtype};
    OpCost sum = OpRegistry::global().cost("add", {table, table}, {});
    work.tied_gradient_sum = {"add", "wte.grad_sum", OpKind::Other, sum.flops, sum.bytes};
    work.tied_gradient_sum_extra = tied_gradient_sum_extra(table);
  }
  return work;
}

void run_attention_over_ring(Workload& work, int parts) {
  const double steps = static_cast<double>(parts);
  for (std::vector<OpWork>* ops : {&work.layer.forward, &work.layer.backward}) {
    for (OpWork& op : *ops) {
      if (op.kind != OpKind::Attention) continue;
      op.flops *= steps;
      op.bytes *= steps;
      op.attention.ring_steps = parts;
    }
  }
}

}  // namespace strata
