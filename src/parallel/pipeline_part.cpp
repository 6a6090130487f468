#include "parallel/pipeline_part.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <set>

#include "core/error.h"
#include "graph/autodiff.h"
#include "ops/collective_group.h"
#include "parallel/pipeline_parallel.h"

namespace strata {

namespace {

// The layer of a node labelled "<prefix><i>." or "<prefix><i>" (and anything after).
std::optional<int> layer_of(const Node& node, const std::string& prefix) {
  if (node.label.rfind(prefix, 0) != 0) return std::nullopt;
  size_t end = prefix.size();
  while (end < node.label.size() && std::isdigit(static_cast<unsigned char>(node.label[end]))) ++end;
  if (end == prefix.size()) return std::nullopt;
  return std::stoi(node.label.substr(prefix.size(), end - prefix.size()));
}

// The part every node belongs to: its layer's, or the first (before every layer) or the last (after).
std::vector<int> parts_of_nodes(const Graph& graph, const std::string& prefix, const std::vector<PipelinePart>& all) {
  const int last = static_cast<int>(all.size()) - 1;
  std::vector<int> owner;
  bool seen_layer = false;
  const Node* after_layers = nullptr;  // the first op outside every layer after one
  for (const Node& node : graph.nodes()) {
    std::optional<int> layer = layer_of(node, prefix);
    if (!layer) {
      owner.push_back(seen_layer ? last : 0);
      if (seen_layer && !after_layers) after_layers = &node;
      continue;
    }
    if (after_layers) {
      fail("pipeline parallelism: node '{}' (op '{}') is outside every layer but runs between layers",
           after_layers->label, after_layers->op);
    }
    seen_layer = true;
    int index = 0;
    while (index < last && *layer >= all[static_cast<size_t>(index)].end_layer()) ++index;
    owner.push_back(index);
  }
  return owner;
}

// Every part of the model `part` is one of, checked against the layers the graph has.
std::vector<PipelinePart> parts_of_model(const Graph& forward, const PipelinePart& part, const std::string& prefix) {
  int layers = 0;
  for (const Node& node : forward.nodes()) {
    if (std::optional<int> layer = layer_of(node, prefix)) layers = std::max(layers, *layer + 1);
  }
  int total = 0;
  std::vector<PipelinePart> all;
  for (int i = 0; i < part.parts(); ++i) {
    if (part.layers_per_part[static_cast<size_t>(i)] < 1) fail("pipeline part {} has no layers", i);
    total += part.layers_per_part[static_cast<size_t>(i)];
    all.push_back({i, part.layers_per_part});
  }
  if (total != layers) fail("pipeline parts of {} layers in all, but the model has {}", total, layers);
  STRATA_CHECK(part.chunks >= 1 && part.parts() % part.chunks == 0, "{} pipeline parts in chunks of {}", part.parts(),
               part.chunks);
  return all;
}

// The values crossing the boundary after part `index`: made by a node of it or an earlier part and
// read by a node of a later one, in the order the later parts first read them (the activation entering
// the next layer first). Sender and receiver find the same list in the same whole graph.
std::vector<int> crossing_values(const Graph& forward, const std::vector<int>& owner, int index) {
  std::vector<int> crossing;
  std::set<int> seen;
  for (size_t i = 0; i < owner.size(); ++i) {
    if (owner[i] <= index) continue;
    for (int input : forward.nodes()[i].inputs) {
      const int producer = forward.value(input).producer;
      if (producer < 0 || owner[static_cast<size_t>(producer)] > index || !seen.insert(input).second) continue;
      crossing.push_back(input);
    }
  }
  return crossing;
}

// Those of the crossing values the loss (the last node's first output) has a gradient for: their
// gradients travel back; counts (a router's assignments) cross forward only.
std::set<int> crossing_gradients(const Graph& forward, const std::vector<int>& incoming,
                                 const std::vector<int>& outgoing) {
  std::vector<int> crossing = incoming;
  crossing.insert(crossing.end(), outgoing.begin(), outgoing.end());
  if (crossing.empty()) return {};
  const int loss = forward.nodes().back().outputs.front();
  STRATA_CHECK(forward.value(loss).meta.shape.empty(), "pipeline parallelism: the forward graph's last node '{}' "
               "does not make the loss", forward.nodes().back().label);
  return values_with_gradient(forward, loss, crossing);
}

// A stage boundary op with the stage of model part `peer_part` (on the pipeline dimension's group).
Attrs stage_transfer(const PipelinePart& part, int peer_part) {
  return {{"group", std::string(kPipelineDimension)},
          {"ranks", int64_t{part.stages()}},
          {"peer", int64_t{peer_part % part.stages()}},
          {"flow", std::string(stage_flow_name(StageFlow::Activations))}};
}

}  // namespace

std::vector<int> balanced_layers(int parts, int layers) {
  STRATA_CHECK(parts >= 1 && parts <= layers, "{} pipeline parts of {} layers", parts, layers);
  std::vector<int> split;
  for (int index = 0; index < parts; ++index) split.push_back(layers / parts + (index < layers % parts ? 1 : 0));
  return split;
}

int PipelinePart::first_layer() const {
  int first = 0;
  for (int i = 0; i < index; ++i) first += layers_per_part[static_cast<size_t>(i)];
  return first;
}

int PipelinePart::end_layer() const { return first_layer() + layers_per_part.at(static_cast<size_t>(index)); }

ParallelForward cut_pipeline_part(const Graph& forward, const PipelinePart& part, const std::string& layer_prefix) {
  const std::vector<int> owner = parts_of_nodes(forward, layer_prefix, parts_of_model(forward, part, layer_prefix));
  const std::vector<int> incoming = part.first() ? std::vector<int>{} : crossing_values(forward, owner, part.index - 1);
  const std::vector<int> outgoing = part.last() ? std::vector<int>{} : crossing_values(forward, owner, part.index);
  const std::set<int> with_gradient = crossing_gradients(forward, incoming, outgoing);

  std::set<int> used;  // inputs and params the part's nodes read
  for (size_t i = 0; i < owner.size(); ++i) {
    if (owner[i] != part.index) continue;
    for (int input : forward.nodes()[i].inputs) used.insert(input);
  }
  GraphRewriter rewriter(forward, {}, [&](int value) { return used.count(value) > 0; });
  Graph& target = rewriter.target();
  ParallelForward result;
  auto transfer = [&](int value, int transferred, std::vector<int>& values) {
    values.push_back(transferred);
    if (!with_gradient.count(value)) result.without_gradient.insert(transferred);
  };
  for (size_t i = 0; i < owner.size(); ++i) {
    if (owner[i] != part.index) continue;
    const std::vector<int>& inputs = forward.nodes()[i].inputs;
    const bool reads_incoming = std::any_of(inputs.begin(), inputs.end(), [&](int input) {
      return std::find(incoming.begin(), incoming.end(), input) != incoming.end();
    });
    if (reads_incoming && result.received.empty()) {
      // Every value crossing into the part is received where the part first reads one, in transfer order.
      for (int value : incoming) {
        const std::string name = result.received.empty() ? "pipeline.received"
                                                         : "pipeline.received(" + forward.value(value).name + ")";
        const int stands_for = target.add_input(name, forward.value(value).meta);
        transfer(value, stands_for, result.received);
        rewriter.set(value, target.apply1("receive_from_stage", {stands_for}, stage_transfer(part, part.index - 1),
                                          "pipeline.receive"));
      }
    }
    rewriter.copy_node(static_cast<int>(i));
  }
  STRATA_CHECK(incoming.empty() || !result.received.empty(), "pipeline part {} reads none of the values it receives",
               part.index);
  for (int value : outgoing) {
    transfer(value,
             target.apply1("send_to_stage", {rewriter.map(value)}, stage_transfer(part, part.index + 1),
                           "pipeline.send"),
             result.sent);
  }
  result.rewritten = std::move(rewriter).finish();
  return result;
}

}  // namespace strata
