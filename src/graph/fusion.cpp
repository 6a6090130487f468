#include "graph/fusion.h"

#include <algorithm>
#include <variant>

#include "ops/fused_program.h"

namespace strata {

namespace {

// Facts about a graph the passes share.
struct Uses {
  const Graph& graph;
  const std::set<int>& keep;
  std::vector<int> readers;  // per value: node inputs reading it
  std::vector<int> reader;   // per value: the last node reading it (the only one where readers is 1), or -1

  Uses(const Graph& g, const std::set<int>& kept)
      : graph(g), keep(kept), readers(static_cast<size_t>(g.num_values())), reader(readers.size(), -1) {
    for (int id = 0; id < g.num_nodes(); ++id) {
      for (int input : g.node(id).inputs) {
        ++readers[static_cast<size_t>(input)];
        reader[static_cast<size_t>(input)] = id;
      }
    }
  }

  int producer(int value) const { return graph.value(value).producer; }
  const TensorMeta& meta(int value) const { return graph.value(value).meta; }
  // The one reader of `value` may compute it in place of its producer.
  bool fusible_away(int value) const {
    return readers[static_cast<size_t>(value)] == 1 && keep.count(value) == 0;
  }
  // Available before node `node` runs.
  bool ready_before(int value, int node) const { return producer(value) < node; }

  // The node of a bf16 -> wider cast producing `value`, which its single
  // reader can absorb by reading the bf16 source (the widening is exact); -1
  // otherwise.
  int absorbable_cast(int value) const {
    int node = producer(value);
    if (node < 0 || graph.node(node).op != "cast" || !fusible_away(value)) return -1;
    return meta(graph.node(node).inputs[0]).dtype == DType::BF16 && meta(value).dtype != DType::BF16 ? node : -1;
  }

  // The node of an f32 -> bf16 cast that is the single reader of f32
  // `value`, which its producer can absorb by storing the rounded value
  // (the cast rounds the f32 value once either way); -1 otherwise.
  int absorbable_narrowing(int value) const {
    if (!fusible_away(value) || meta(value).dtype != DType::F32) return -1;
    int node = reader[static_cast<size_t>(value)];
    if (graph.node(node).op != "cast") return -1;
    return meta(graph.node(node).outputs[0]).dtype == DType::BF16 ? node : -1;
  }
};

// ---- add + norm, norm backward + add -----------------------------------------

// The norms and the fused ops that replace them: add_<norm> takes (x, r, the
// norm's other inputs) and outputs (sum, the norm's outputs); <backward>_add
// takes (the backward's inputs, dres) and outputs the backward's outputs.
struct NormFusion {
  const char* norm;
  const char* add_norm;
  const char* backward;
  const char* backward_add;
};
constexpr NormFusion kNormFusions[] = {
    {"layernorm", "add_layernorm", "layernorm_backward", "layernorm_backward_add"},
    {"rms_norm", "add_rms_norm", "rms_norm_backward", "rms_norm_backward_add"},
};

const NormFusion* fusion_of_norm(const std::string& op) {
  for (const NormFusion& fusion : kNormFusions) {
    if (op == fusion.norm) return &fusion;
  }
  return nullptr;
}

const NormFusion* fusion_of_backward(const std::string& op) {
  for (const NormFusion& fusion : kNormFusions) {
    if (op == fusion.backward) return &fusion;
  }
  return nullptr;
}

struct Copy {};
struct Skip {};
struct AddNorm {
  int norm;        // its node; the add's node is where the fused node goes
  int x, r;        // source values
  int y_cast = -1;  // the node of the cast to bf16 that y's one reader is, absorbed (y_dtype), or -1
};
struct NormBackwardAdd {
  int add;       // the accumulating add; the norm backward's node is where the fused node goes
  int dy, dres;  // source values
};
using Action = std::variant<Copy, Skip, AddNorm, NormBackwardAdd>;

// Plans add_<norm> at the add `add` feeding norm node `norm_node`.
void plan_add_norm(const Uses& uses, int add, int norm_node, std::vector<Action>& plan) {
  const Graph& graph = uses.graph;
  const Node& sum_node = graph.node(add);
  const Node& norm = graph.node(norm_node);
  if (!std::holds_alternative<Copy>(plan[static_cast<size_t>(add)])) return;
  for (size_t i = 1; i < norm.inputs.size(); ++i) {
    if (!uses.ready_before(norm.inputs[i], add)) return;  // the weights must exist where the add was
  }
  int x = sum_node.inputs[0], r = sum_node.inputs[1];
  int cast = uses.absorbable_cast(r);
  if (cast < 0 && uses.meta(x).shape == uses.meta(r).shape && (cast = uses.absorbable_cast(x)) >= 0) std::swap(x, r);
  if (cast >= 0) {
    plan[static_cast<size_t>(cast)] = Skip{};
    r = graph.node(cast).inputs[0];
  }
  // Only RMSNorm's: measured, add_layernorm's bf16 store cost what the cast did (no gain).
  int y_cast = norm.op == "rms_norm" ? uses.absorbable_narrowing(norm.outputs[0]) : -1;
  if (y_cast >= 0 && std::holds_alternative<Copy>(plan[static_cast<size_t>(y_cast)])) {
    plan[static_cast<size_t>(y_cast)] = Skip{};
  } else {
    y_cast = -1;
  }
  plan[static_cast<size_t>(add)] = AddNorm{norm_node, x, r, y_cast};
  plan[static_cast<size_t>(norm_node)] = Skip{};
}

// Plans <backward>_add at norm backward node `backward` whose dx only the add
// `add` reads.
bool plan_backward_add(const Uses& uses, int backward, int add, std::vector<Action>& plan) {
  const Graph& graph = uses.graph;
  const Node& sum_node = graph.node(add);
  const Node& grad = graph.node(backward);
  int dx = grad.outputs[0];
  if (sum_node.inputs[0] == sum_node.inputs[1] || !uses.fusible_away(dx)) return false;
  int dres = sum_node.inputs[0] == dx ? sum_node.inputs[1] : sum_node.inputs[0];
  if (!(uses.meta(dres) == uses.meta(dx)) || !uses.ready_before(dres, backward)) return false;
  if (!std::holds_alternative<Copy>(plan[static_cast<size_t>(backward)]) ||
      !std::holds_alternative<Copy>(plan[static_cast<size_t>(add)])) {
    return false;
  }
  int dy = grad.inputs[0];
  int cast = uses.absorbable_cast(dy);
  if (cast >= 0) {
    plan[static_cast<size_t>(cast)] = Skip{};
    dy = graph.node(cast).inputs[0];
  }
  plan[static_cast<size_t>(backward)] = NormBackwardAdd{add, dy, dres};
  plan[static_cast<size_t>(add)] = Skip{};
  return true;
}

// ---- element-wise trees ------------------------------------------------------

bool fusible_node(const Graph& graph, const Node& node) {
  if (!runs_in_fused_program(node.op)) return false;
  auto storable = [&](int value) {
    DType dtype = graph.value(value).meta.dtype;
    return dtype == DType::F32 || dtype == DType::BF16;
  };
  return std::all_of(node.inputs.begin(), node.inputs.end(), storable) && storable(node.outputs[0]);
}

struct Tree {
  std::vector<int> members;  // node ids, ascending (the root last)
  std::vector<int> inputs;   // values read from outside, in first-use order
};

std::vector<int> external_inputs(const Graph& graph, const std::vector<int>& members) {
  std::set<int> produced;
  for (int member : members) produced.insert(graph.node(member).outputs[0]);
  std::vector<int> inputs;
  for (int member : members) {
    for (int input : graph.node(member).inputs) {
      if (!produced.count(input) && std::find(inputs.begin(), inputs.end(), input) == inputs.end()) {
        inputs.push_back(input);
      }
    }
  }
  return inputs;
}

// Grows a tree from `root` towards its inputs, greedily, within the limits.
Tree grow_tree(const Uses& uses, int root, const std::vector<bool>& taken) {
  const Graph& graph = uses.graph;
  const Shape& shape = graph.value(graph.node(root).outputs[0]).meta.shape;
  std::vector<int> members{root};
  for (size_t next = 0; next < members.size(); ++next) {
    for (int input : graph.node(members[next]).inputs) {
      int producer = uses.producer(input);
      if (producer < 0 || taken[static_cast<size_t>(producer)] || !uses.fusible_away(input) ||
          !fusible_node(graph, graph.node(producer)) || uses.meta(input).shape != shape ||
          static_cast<int>(members.size()) >= kMaxFusedInstructions) {
        continue;
      }
      std::vector<int> grown = members;
      grown.push_back(producer);
      if (static_cast<int>(external_inputs(graph, grown).size()) <= kMaxFusedInputs) members = std::move(grown);
    }
  }
  std::sort(members.begin(), members.end());
  return {members, external_inputs(graph, members)};
}

std::string tree_program(const Graph& graph, const Tree& tree) {
  FusedProgram program;
  program.num_inputs = static_cast<int>(tree.inputs.size());
  std::vector<int> registers = tree.inputs;  // value held by each register
  auto register_of = [&](int value) {
    return static_cast<int>(std::find(registers.begin(), registers.end(), value) - registers.begin());
  };
  for (int member : tree.members) {
    const Node& node = graph.node(member);
    std::vector<int> operands;
    for (int input : node.inputs) operands.push_back(register_of(input));
    program.code.push_back(*FusedInstruction::of(node.op, node.attrs, operands));
    registers.push_back(node.outputs[0]);
  }
  return program.str();
}

}  // namespace

GraphRewriter::Result fuse_residual_layernorm(const Graph& graph, const std::set<int>& keep) {
  Uses uses(graph, keep);
  std::vector<Action> plan(static_cast<size_t>(graph.num_nodes()), Copy{});
  for (int id = 0; id < graph.num_nodes(); ++id) {
    const Node& node = graph.node(id);
    if (fusion_of_norm(node.op) != nullptr) {
      int add = uses.producer(node.inputs[0]);
      if (add >= 0 && graph.node(add).op == "add") plan_add_norm(uses, add, id, plan);
    } else if (node.op == "add") {
      for (int input : node.inputs) {
        int backward = uses.producer(input);
        if (backward >= 0 && fusion_of_backward(graph.node(backward).op) != nullptr &&
            graph.node(backward).outputs[0] == input && plan_backward_add(uses, backward, id, plan)) {
          break;
        }
      }
    }
  }

  GraphRewriter rewriter(graph);
  Graph& target = rewriter.target();
  for (int id = 0; id < graph.num_nodes(); ++id) {
    const Action& action = plan[static_cast<size_t>(id)];
    if (std::holds_alternative<Copy>(action)) {
      rewriter.copy_node(id);
    } else if (const auto* fused = std::get_if<AddNorm>(&action)) {
      const Node& norm = graph.node(fused->norm);
      std::vector<int> inputs{rewriter.map(fused->x), rewriter.map(fused->r)};
      for (size_t i = 1; i < norm.inputs.size(); ++i) inputs.push_back(rewriter.map(norm.inputs[i]));
      Attrs attrs = norm.attrs;
      if (fused->y_cast >= 0) attrs.set("y_dtype", std::string(dtype_name(DType::BF16)));
      std::vector<int> outputs = target.apply(fusion_of_norm(norm.op)->add_norm, inputs, attrs, norm.label);
      rewriter.set(graph.node(id).outputs[0], outputs[0]);
      // With the cast absorbed, y stands for the cast's output; the f32 y is gone.
      if (fused->y_cast >= 0) rewriter.set(graph.node(fused->y_cast).outputs[0], outputs[1]);
      for (size_t i = 0; i < norm.outputs.size(); ++i) {
        if (i > 0 || fused->y_cast < 0) rewriter.set(norm.outputs[i], outputs[i + 1]);
      }
    } else if (const auto* fused = std::get_if<NormBackwardAdd>(&action)) {
      const Node& grad = graph.node(id);
      std::vector<int> inputs{rewriter.map(fused->dy)};
      for (size_t i = 1; i < grad.inputs.size(); ++i) inputs.push_back(rewriter.map(grad.inputs[i]));
      inputs.push_back(rewriter.map(fused->dres));
      std::vector<int> outputs =
          target.apply(fusion_of_backward(grad.op)->backward_add, inputs, grad.attrs, grad.label);
      rewriter.set(graph.node(fused->add).outputs[0], outputs[0]);
      for (size_t i = 1; i < grad.outputs.size(); ++i) rewriter.set(grad.outputs[i], outputs[i]);
    }
  }
  return std::move(rewriter).finish();
}

GraphRewriter::Result fuse_elementwise(const Graph& graph, const std::set<int>& keep) {
  Uses uses(graph, keep);
  std::vector<bool> taken(static_cast<size_t>(graph.num_nodes()), false);
  std::vector<Tree> trees;
  std::vector<int> tree_at(static_cast<size_t>(graph.num_nodes()), -1);  // root node -> tree
  for (int id = graph.num_nodes() - 1; id >= 0; --id) {
    if (taken[static_cast<size_t>(id)] || !fusible_node(graph, graph.node(id))) continue;
    Tree tree = grow_tree(uses, id, taken);
    if (tree.members.size() < 2) continue;
    for (int member : tree.members) taken[static_cast<size_t>(member)] = true;
    tree_at[static_cast<size_t>(id)] = static_cast<int>(trees.size());
    trees.push_back(std::move(tree));
  }

  GraphRewriter rewriter(graph);
  for (int id = 0; id < graph.num_nodes(); ++id) {
    int tree_id = tree_at[static_cast<size_t>(id)];
    if (tree_id >= 0) {
      const Tree& tree = trees[static_cast<size_t>(tree_id)];
      std::vector<int> inputs;
      for (int input : tree.inputs) inputs.push_back(rewriter.map(input));
      const Node& root = graph.node(id);
      int out = rewriter.target().apply1(fused_elementwise_op(static_cast<int>(inputs.size())), inputs,
                                         {{"program", tree_program(graph, tree)}}, root.label);
      rewriter.set(root.outputs[0], out);
    } else if (!taken[static_cast<size_t>(id)]) {
      rewriter.copy_node(id);
    }
  }
  return std::move(rewriter).finish();
}

GraphRewriter::Result fuse_all(const Graph& graph, const std::set<int>& keep) {
  GraphRewriter::Result first = fuse_residual_layernorm(graph, keep);
  std::set<int> kept;
  for (int value : keep) kept.insert(first(value));
  GraphRewriter::Result second = fuse_elementwise(first.graph, kept);
  return chain_rewrites(std::move(first), std::move(second));
}

}  // namespace strata
