// Data parallelism in the planner: the devices the other dimensions leave. Whether its replicas (with
// expert parallelism's) divide the batch is the search's check of every batch-splitting dimension.
#include "planner/plan_dimension.h"

namespace strata {

PlannerDimension data_parallel_planning() {
  return {.name = "dp",
          .parallelism = "data",
          .fix_help = "Fix the data-parallel degree",
          .takes_remaining_devices = true};
}

}  // namespace strata
