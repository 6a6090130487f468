#pragma once
// The one answer a scan ends with, by the usual decision rules of a migration:
// - rewrite: custom kernels or extensions, custom communication, CUDA-only libraries with no
//   Strata replacement (findings that block the move), or a model architecture Strata lacks;
// - needs changes: findings that need a change (listed by API with counts), ops of the mapped
//   model that do not run natively on the backend, no model recognised (or its sizes not found),
//   or unreadable files;
// - quick switch: a standard architecture, nothing blocking or to change, every op native.
#include <cstdint>
#include <string>
#include <vector>

#include "scan/model_config.h"
#include "scan/scan_findings.h"

namespace strata {

enum class ScanAnswer { QuickSwitch, NeedsChanges, Rewrite };

std::string_view answer_name(ScanAnswer answer);  // "quick switch", "needs changes", "rewrite"

// Findings of one API grouped: what to change (or what blocks), how often, and the tip.
struct ApiCount {
  std::string api, category, severity, tip;
  int64_t count = 0;
};

struct ScanVerdict {
  ScanAnswer answer = ScanAnswer::QuickSwitch;
  std::vector<std::string> why;   // one line per reason, the deciding ones first
  std::vector<ApiCount> blockers;  // severity "blocks", most frequent first
  std::vector<ApiCount> changes;   // severity "change"
  std::vector<ApiCount> risks;     // severity "risk": to check, never deciding
};

ScanVerdict judge_scan(const ScanFindings& scan, const ModelCheck& model);

}  // namespace strata
