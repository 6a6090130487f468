#pragma once
// Dynamic loss scaling for fp16 training: the loss gradient is multiplied by
// the scale so small fp16 gradients do not flush to zero; a step whose
// gradients overflowed (inf/nan) is skipped and the scale backs off, and
// after `growth_interval` finite steps in a row it grows again. bf16 and fp32
// have f32's exponent range and run with a fixed scale of 1.
#include <cstdint>

namespace strata {

struct LossScaleSettings {
  bool dynamic = false;
  double initial = 65536;
  int64_t growth_interval = 2000;
  double growth = 2;
  double backoff = 0.5;
};

class LossScaler {
 public:
  explicit LossScaler(LossScaleSettings settings);

  bool dynamic() const { return settings_.dynamic; }
  double scale() const { return scale_; }
  int64_t finite_steps() const { return finite_steps_; }

  // Takes the outcome of a step's gradients; returns whether the step may be
  // applied (always, unless dynamic and not finite) and updates the scale.
  bool update(bool gradients_finite);

  // For checkpoints: the state after the last completed step.
  void restore(double scale, int64_t finite_steps);

 private:
  LossScaleSettings settings_;
  double scale_;
  int64_t finite_steps_ = 0;
};

}  // namespace strata
