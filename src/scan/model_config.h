#pragma once
// The model the scanner found, as a Strata config (the [model] keys it mapped, the chosen backend
// and precision), and that config's per-model op verdict (train/op_coverage.h) on the backend.
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "scan/scan_findings.h"
#include "train/op_coverage.h"

namespace strata {

struct ModelCheck {
  bool found = false;      // the project builds a model the scanner recognised
  bool supported = false;  // ... of a family Strata has, mapped to [model] keys
  std::string evidence;    // where: "class GPT at model.py:65", "...from_pretrained('gpt2') at train.py:3"
  std::string reason;      // why it maps (or why not)
  std::string family;
  std::vector<std::string> assumed;     // [model] keys not read from the project (defaults)
  std::vector<std::string> missing;     // sizes the project does not give (the config has Strata's defaults)
  std::vector<std::string> also_found;  // other models the project shows, less trusted (evidence, family)
  std::string config_toml;              // the Strata config (empty unless supported)
  std::string config_error;             // the config Strata refused, and why (empty: it loads)
  std::optional<ConfigCoverage> coverage;  // the op verdict on the backend, when the config loads
};

// The precision the project trains in, by its habits: bf16 when it uses bf16, else f16 when it uses
// fp16 (half(), float16, GradScaler), else f32.
std::string project_precision(const ScanFindings& scan);

// The scanner's model document checked and judged on `backend` in `precision` (f32, bf16, f16).
ModelCheck check_model(const nlohmann::json& model, const std::string& backend, const std::string& precision);

}  // namespace strata
