#include "backends/cpu/indices.h"

namespace strata::cpu {

void check_indices(const std::string& op, const std::string& input, const Tensor& ids, int64_t bound) {
  with_indices(ids, [&](const auto* values) {
    for (int64_t p = 0; p < ids.numel(); ++p) {
      int64_t value = static_cast<int64_t>(values[p]);
      if (value < 0 || value >= bound) {
        fail("op '{}': input '{}' {} holds {} at flat position {}, outside [0, {})", op, input, shape_str(ids.shape()),
             value, p, bound);
      }
    }
  });
}

}  // namespace strata::cpu
