#pragma once
// The time of one op on a device: a roofline of its arithmetic (matrix unit at
// the efficiency its size reaches, for GEMMs and attention; vector unit for the
// rest) against its memory traffic, plus the fixed cost of launching it,
// divided by the op's measured (or described) efficiency relative to that.
#include "planner/hardware.h"
#include "planner/workload.h"

namespace strata {

// `scale` shrinks the op's work (sequence parallelism splits residual-stream ops).
double op_seconds(const OpWork& op, const DeviceSpec& device, DType dtype, double scale = 1.0);

}  // namespace strata
