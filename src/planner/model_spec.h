#pragma once
// The model a plan is for: a configuration by preset name (gpt2-small ...
// gpt-1t, smollm-135m, llama2-7b, llama3-8b) or from a TOML file whose [model] table has the training config's
// keys (a whole training config works: other tables are not read, except
// train.global_batch as the default global batch).
#include <string>
#include <vector>

#include "model/model_config.h"

namespace strata {

struct ModelSpec {
  std::string name;
  ModelConfig config;
  int64_t global_batch = 0;  // rows per optimizer step the source suggests; 0: none
};

std::vector<std::string> model_preset_names();
bool is_model_preset(const std::string& name);
ModelSpec model_preset(const std::string& name);  // throws listing the presets

ModelSpec parse_model_file(const std::string& toml_text, const std::string& source);
// A preset name, a HuggingFace model directory (its config.json), else a TOML file path.
ModelSpec load_model_spec(const std::string& name_or_path);

}  // namespace strata
