#pragma once
// Pipeline parallelism's cut: a model's whole forward graph becomes the part
// one stage runs, layers [first_layer, end_layer) (by the labels of the
// family's layers, "<prefix><i>."), the first part also the ops before every
// layer (the embedding), the last part the ops after them (final norm, head,
// loss). A part receives the activation entering its first layer as a new
// graph input and sends the one leaving its last layer; the inputs and params
// it does not use are not in it. The tied embedding is in the first and the
// last part: each has its own copy, whose gradients the runtime sums.
#include <string>
#include <vector>

#include "model/model_graph.h"

namespace strata {

// Layers per part: as even as possible, the earlier parts taking one more (the
// last part also runs the head).
std::vector<int> balanced_layers(int parts, int layers);

struct PipelinePart {
  int index = 0;                     // 0 .. parts - 1, in model order
  std::vector<int> layers_per_part;  // every part's, in order (the planner's layers_per_stage, or balanced)
  int chunks = 1;                    // parts per stage (interleaving): part q runs on stage q mod stages()

  int parts() const { return static_cast<int>(layers_per_part.size()); }
  int stages() const { return parts() / chunks; }
  int first_layer() const;
  int end_layer() const;
  bool first() const { return index == 0; }
  bool last() const { return index == parts() - 1; }
};

// Fails, naming the node, when a part would receive or send more than one
// value, or an op outside every layer sits between layers.
ParallelForward cut_pipeline_part(const Graph& forward, const PipelinePart& part, const std::string& layer_prefix);

}  // namespace strata
