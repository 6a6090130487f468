#include "train/loss_scaler.h"

#include "core/error.h"

namespace strata {

LossScaler::LossScaler(LossScaleSettings settings)
    : settings_(settings), scale_(settings.dynamic ? settings.initial : 1.0) {}

bool LossScaler::update(bool gradients_finite) {
  if (!settings_.dynamic) return true;
  if (!gradients_finite) {
    scale_ *= settings_.backoff;
    finite_steps_ = 0;
    return false;
  }
  if (++finite_steps_ == settings_.growth_interval) {
    scale_ *= settings_.growth;
    finite_steps_ = 0;
  }
  return true;
}

void LossScaler::restore(double scale, int64_t finite_steps) {
  if (!(scale > 0) || finite_steps < 0) fail("checkpoint loss scale {} / finite steps {} are invalid", scale, finite_steps);
  scale_ = scale;
  finite_steps_ = finite_steps;
}

}  // namespace strata
