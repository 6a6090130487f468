#pragma once
// A layout run's graph tensors, across processes. `strata train --capture-graph DIR`
// (what `strata compare` runs a layout side with) has every rank at coordinate 0 of
// the dimensions that replicate the model (data parallelism) write what it captured
// of the first step's first micro-batch (each model part's forward and backward
// tensors, its parameters' gradients, each with its layout) to
// DIR/rank-<dim><coordinate>-....safetensors, one <dim><coordinate> per dimension
// whose graph pass splits the model (rank-tp1-pp0). That micro-batch is the step's
// first, the one a process running the whole step alone captures. The comparison
// then reads every rank's file back and puts each tensor together whole: a split
// value from its group's pieces, a partial one summed, a parameter's gradient summed
// over the model parts that use it (the tied embedding's two).
#include <filesystem>
#include <memory>

#include "compare/capture.h"
#include "train/config.h"
#include "train/trainer.h"

namespace strata {

class RankGraphDump {
 public:
  // Observes `trainer`'s first step (data-parallel rank 0 only; the others record nothing).
  RankGraphDump(Trainer& trainer, const TrainConfig& config, std::filesystem::path dir);
  ~RankGraphDump();
  // After the first step: writes this rank's file (atomically), if it captured anything.
  void write() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Every rank's file in `dir`, each tensor whole, to `sink`: forward tensors in model order (pipeline
// parts in order), then the backward pass's from the last part to the first.
void assemble_rank_dumps(const std::filesystem::path& dir, const CaptureSink& sink);

}  // namespace strata
