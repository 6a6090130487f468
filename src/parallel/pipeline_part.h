#pragma once
// Pipeline parallelism's cut: a model's whole forward graph becomes the part
// one stage runs, layers [first_layer, end_layer) (by the labels of the
// family's layers, "<prefix><i>."), the first part also the ops before every
// layer (the embedding), the last part the ops after them (final norm, head,
// loss). Every value made before a boundary and read after it crosses it: the
// part receives each as a new graph input (the activation entering its first
// layer first; a mixture of experts' running router sums after it, in the
// order the later parts first read them) and sends each it made or received
// that a later part reads. The gradients of those the loss has one for (the
// forward graph's last node makes the loss) travel back; counts cross forward
// only. The inputs and params a part does not use are not in it. The tied
// embedding is in the first and the last part: each has its own copy, whose
// gradients the runtime sums.
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

// Fails, naming the node, when an op outside every layer sits between layers.
ParallelForward cut_pipeline_part(const Graph& forward, const PipelinePart& part, const std::string& layer_prefix);

}  // namespace strata
