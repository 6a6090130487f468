#include "planner/fsdp_schedule.h"

#include <algorithm>

namespace strata {

namespace {

// Two streams, compute and the network; a unit's compute waits for its gather, the network takes
// one collective at a time in the order FSDP issues them.
struct Streams {
  double compute = 0;
  double network = 0;
  double busy = 0;
  // A collective of `seconds` issued at `ready`; returns when it ends.
  double communicate(double ready, double seconds) {
    network = std::max(network, ready) + seconds;
    busy += seconds;
    return network;
  }
  void run(double ready, double seconds) { compute = std::max(compute, ready) + seconds; }
};

void forward(const FsdpStage& s, Streams& streams) {
  const double root = streams.communicate(0.0, s.root_gather);
  streams.run(root, s.embedding_forward);
  double gathered = s.layers > 0 ? streams.communicate(0.0, s.layer_gather) : 0.0;
  for (int i = 0; i < s.layers; ++i) {
    // Layer i+1 may be gathered once the unit before layer i is done with its parameters.
    const double freed = streams.compute;
    streams.run(gathered, s.layer_forward);
    if (i + 1 < s.layers) gathered = streams.communicate(freed, s.layer_gather);
  }
  streams.run(0.0, s.head_forward);
}

void backward(const FsdpStage& s, Streams& streams) {
  // The last layer's gather is prefetched while the head runs backward.
  const double head_start = streams.compute;
  double gathered = s.layers > 0 ? streams.communicate(head_start, s.layer_gather) : 0.0;
  streams.run(0.0, s.head_backward);
  for (int i = s.layers - 1; i >= 0; --i) {
    const double start = std::max(streams.compute, gathered);
    if (i > 0) gathered = streams.communicate(start, s.layer_gather);
    streams.run(start, s.layer_backward);
    streams.communicate(streams.compute, s.layer_reduce);
  }
  streams.run(0.0, s.embedding_backward);
  streams.communicate(streams.compute, s.root_reduce);
}

}  // namespace

FsdpExposure fsdp_exposure(const FsdpStage& stage) {
  Streams streams;
  forward(stage, streams);
  backward(stage, streams);
  const double n = stage.layers;
  const double compute = stage.embedding_forward + stage.embedding_backward + stage.head_forward +
                         stage.head_backward + n * (stage.layer_forward + stage.layer_backward);
  return {std::max(streams.compute, streams.network) - compute, streams.busy};
}

}  // namespace strata
