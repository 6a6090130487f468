#include "scan/scan_verdict.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace strata {

namespace {

std::vector<ApiCount> grouped(const ScanFindings& scan, const std::string& severity) {
  std::map<std::pair<std::string, std::string>, ApiCount> groups;
  for (const Finding& finding : scan.findings) {
    if (finding.severity != severity) continue;
    ApiCount& group = groups[{finding.category, finding.api}];
    if (group.count++ == 0) group = {finding.api, finding.category, finding.severity, finding.tip, 1};
  }
  std::vector<ApiCount> counts;
  for (auto& [key, group] : groups) counts.push_back(std::move(group));
  std::stable_sort(counts.begin(), counts.end(), [](const ApiCount& a, const ApiCount& b) { return a.count > b.count; });
  return counts;
}

int64_t total(const std::vector<ApiCount>& counts) {
  int64_t sum = 0;
  for (const ApiCount& count : counts) sum += count.count;
  return sum;
}

std::string categories(const std::vector<ApiCount>& counts) {
  std::map<std::string, int64_t> per_category;
  for (const ApiCount& count : counts) per_category[count.category] += count.count;
  std::string text;
  for (const auto& [category, count] : per_category) text += fmt::format("{}{} {}", text.empty() ? "" : ", ", count, category);
  return text;
}

// The model's part of the verdict: a reason, and whether it forces a rewrite or a change.
void judge_model(const ModelCheck& model, ScanVerdict& verdict, bool& rewrite, bool& change) {
  if (!model.found) {
    change = true;
    verdict.why.push_back(fmt::format("no model Strata knows was recognised ({}): describe it as a Strata config "
                                      "by hand if it is GPT-2- or LLaMA-like, else it is a rewrite",
                                      model.reason));
  } else if (!model.supported) {
    rewrite = true;
    verdict.why.push_back(fmt::format("unsupported architecture: {} ({})", model.reason, model.evidence));
  } else if (!model.config_error.empty()) {
    change = true;
    verdict.why.push_back(fmt::format("the {} model of {} does not load as a Strata config: {}", model.family,
                                      model.evidence, model.config_error));
  } else if (!model.missing.empty()) {
    change = true;
    verdict.why.push_back(fmt::format("the {} model of {}: its {} were not found in the project; set them in the "
                                      "config before judging its ops",
                                      model.family, model.evidence, fmt::join(model.missing, ", ")));
  } else if (!model.coverage->quick_switch()) {
    change = true;
    verdict.why.push_back(fmt::format("the {} model of {}: {}", model.family, model.evidence,
                                      coverage_verdict(*model.coverage)));
  } else {
    verdict.why.push_back(fmt::format("the {} model of {} is standard: {}", model.family, model.evidence,
                                      coverage_verdict(*model.coverage)));
  }
}

}  // namespace

std::string_view answer_name(ScanAnswer answer) {
  switch (answer) {
    case ScanAnswer::QuickSwitch: return "quick switch";
    case ScanAnswer::NeedsChanges: return "needs changes";
    case ScanAnswer::Rewrite: return "rewrite";
  }
  return "unknown";
}

ScanVerdict judge_scan(const ScanFindings& scan, const ModelCheck& model) {
  ScanVerdict verdict;
  verdict.blockers = grouped(scan, "blocks");
  verdict.changes = grouped(scan, "change");
  verdict.risks = grouped(scan, "risk");
  bool rewrite = !verdict.blockers.empty(), change = !verdict.changes.empty();
  if (rewrite) {
    verdict.why.push_back(fmt::format("{} finding(s) block the move ({}): custom kernels, extensions, custom "
                                      "communication or CUDA-only libraries with no Strata equivalent",
                                      total(verdict.blockers), categories(verdict.blockers)));
  }
  judge_model(model, verdict, rewrite, change);
  if (!verdict.changes.empty()) {
    verdict.why.push_back(fmt::format("{} finding(s) of {} API(s) need a change ({}), each with a Strata setting or "
                                      "removal in its tip",
                                      total(verdict.changes), verdict.changes.size(), categories(verdict.changes)));
  }
  if (!scan.unreadable.empty()) {
    change = true;
    verdict.why.push_back(fmt::format("{} file(s) could not be read and were not judged: check them by hand",
                                      scan.unreadable.size()));
  }
  if (!verdict.risks.empty()) {
    verdict.why.push_back(fmt::format("{} finding(s) are performance or numerics risks to check (not deciding)",
                                      total(verdict.risks)));
  }
  verdict.answer = rewrite ? ScanAnswer::Rewrite : change ? ScanAnswer::NeedsChanges : ScanAnswer::QuickSwitch;
  return verdict;
}

}  // namespace strata
