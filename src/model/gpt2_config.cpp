#include "model/gpt2_config.h"

#include "core/error.h"

namespace strata {

void GPT2Config::validate() const {
  auto positive = [](const char* key, int64_t value) {
    if (value <= 0) fail("key '{}' must be positive, got {}", key, value);
  };
  positive("model.n_layer", n_layer);
  positive("model.n_head", n_head);
  positive("model.n_embd", n_embd);
  positive("model.vocab_size", vocab_size);
  positive("model.block_size", block_size);
  if (n_embd % n_head != 0) {
    fail("key 'model.n_head' ({}) must divide 'model.n_embd' ({})", n_head, n_embd);
  }
  if (!(layer_norm_eps > 0)) fail("key 'model.layer_norm_eps' must be positive, got {}", layer_norm_eps);
}

int64_t GPT2Config::num_parameters() const {
  int64_t c = n_embd;
  int64_t per_layer = 2 * c + (c * 3 * c + 3 * c) + (c * c + c) + 2 * c + (c * 4 * c + 4 * c) + (4 * c * c + c);
  return vocab_size * c + block_size * c + n_layer * per_layer + 2 * c;
}

}  // namespace strata
