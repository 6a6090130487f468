// Data parallelism in the planner: the devices the other dimensions leave. Whether its replicas (with
// expert parallelism's) divide the batch is the search's check of every batch-splitting dimension; the
// gradients' reduction over its replicas, which the cost model prices with ZeRO's collectives, is its time.
#include "planner/plan_dimension.h"

namespace strata {

PlannerDimension data_parallel_planning() {
  return {.name = "dp",
          .parallelism = "data",
          .fix_help = "Fix the data-parallel degree",
          .takes_remaining_devices = true,
          .comm_name = "data-parallel gradient reduction",
          .reduces_gradients = true,
          .replicates_weights = true};
}

}  // namespace strata
