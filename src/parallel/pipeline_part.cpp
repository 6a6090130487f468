#include "parallel/pipeline_part.h"

#include <cctype>
#include <optional>
#include <set>

#include "core/error.h"
#include "ops/collective_group.h"

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

// A stage boundary op with the stage of model part `peer_part` (group "pp").
Attrs stage_transfer(const PipelinePart& part, int peer_part) {
  return {{"group", std::string("pp")},
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
  int layers = 0;
  for (const Node& node : forward.nodes()) {
    if (std::optional<int> layer = layer_of(node, layer_prefix)) layers = std::max(layers, *layer + 1);
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
  const std::vector<int> owner = parts_of_nodes(forward, layer_prefix, all);

  std::set<int> used;  // inputs and params the part's nodes read
  for (size_t i = 0; i < owner.size(); ++i) {
    if (owner[i] != part.index) continue;
    for (int input : forward.nodes()[i].inputs) used.insert(input);
  }
  GraphRewriter rewriter(forward, {}, [&](int value) { return used.count(value) > 0; });
  ParallelForward result;
  int received_source = -1, sent_source = -1;
  for (size_t i = 0; i < owner.size(); ++i) {
    const Node& node = forward.nodes()[i];
    if (owner[i] == part.index) {
      for (int input : node.inputs) {
        if (rewriter.is_mapped(input) || forward.value(input).kind != ValueKind::Intermediate) continue;
        if (received_source >= 0 && received_source != input) {
          fail("pipeline parallelism: part {} would receive both '{}' and '{}' (node '{}'): a stage boundary "
               "carries one activation",
               part.index, forward.value(received_source).name, forward.value(input).name, node.label);
        }
        received_source = input;
        Graph& target = rewriter.target();
        result.received = target.add_input("pipeline.received", forward.value(input).meta);
        rewriter.set(input, target.apply1("receive_from_stage", {result.received},
                                          stage_transfer(part, part.index - 1), "pipeline.receive"));
      }
      rewriter.copy_node(static_cast<int>(i));
    } else if (owner[i] > part.index) {
      for (int input : node.inputs) {
        const int producer = forward.value(input).producer;
        if (producer < 0 || owner[static_cast<size_t>(producer)] != part.index) continue;
        if (sent_source >= 0 && sent_source != input) {
          fail("pipeline parallelism: part {} would send both '{}' and '{}' (node '{}'): a stage boundary carries "
               "one activation",
               part.index, forward.value(sent_source).name, forward.value(input).name, node.label);
        }
        sent_source = input;
      }
    }
  }
  if (sent_source >= 0) {
    result.sent = rewriter.target().apply1("send_to_stage", {rewriter.map(sent_source)},
                                           stage_transfer(part, part.index + 1), "pipeline.send");
  }
  result.rewritten = std::move(rewriter).finish();
  return result;
}

}  // namespace strata
