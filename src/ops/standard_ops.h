#pragma once
#include "ops/schema.h"

namespace strata {

// Registers every op Strata's models use; semantics are documented in
// src/ops/README.md and in each schema's summary.
void register_standard_ops(OpRegistry& registry);

// Op families defined in their own files (called by register_standard_ops).
void add_cast_ops(OpRegistry& registry);

}  // namespace strata
