// The verdict's decision rules and the findings document's checks, on hand-made scans: what blocks
// is a rewrite, what needs a change (or an op not native, no model, an unreadable file) needs
// changes, risks alone do not decide; CSV fields are quoted as RFC 4180 says.
#include <gtest/gtest.h>

#include "core/error.h"
#include "scan/scan_output.h"
#include "scan/scan_verdict.h"

namespace strata {
namespace {

Finding finding(const std::string& api, const std::string& severity, const std::string& category = "cuda") {
  return {"train.py", 3, 3, api, category, severity, "a reason", "a tip", "cuda"};
}

ModelCheck standard_model() {
  ModelCheck model;
  model.found = model.supported = true;
  model.family = "gpt2";
  model.evidence = "class GPT at model.py:1";
  model.coverage = ConfigCoverage{};  // no gaps: every op native
  return model;
}

TEST(ScanVerdict, NothingToChangeIsAQuickSwitch) {
  ScanFindings scan;
  scan.findings = {finding("torch.float16", "risk", "precision"), finding("torch.bfloat16", "info", "precision")};
  const ScanVerdict verdict = judge_scan(scan, standard_model());
  EXPECT_EQ(verdict.answer, ScanAnswer::QuickSwitch);
  ASSERT_EQ(verdict.risks.size(), 1u);
  EXPECT_EQ(verdict.risks[0].api, "torch.float16");
}

TEST(ScanVerdict, ChangesAreListedWithCounts) {
  ScanFindings scan;
  scan.findings = {finding(".cuda()", "change"), finding("torch.cuda.synchronize", "change"), finding(".cuda()", "change")};
  const ScanVerdict verdict = judge_scan(scan, standard_model());
  EXPECT_EQ(verdict.answer, ScanAnswer::NeedsChanges);
  ASSERT_EQ(verdict.changes.size(), 2u);
  EXPECT_EQ(verdict.changes[0].api, ".cuda()");
  EXPECT_EQ(verdict.changes[0].count, 2);
  EXPECT_EQ(verdict.changes[1].count, 1);
}

TEST(ScanVerdict, ABlockingFindingIsARewrite) {
  ScanFindings scan;
  scan.findings = {finding(".cuda()", "change"), finding("@triton.jit", "blocks", "extension")};
  EXPECT_EQ(judge_scan(scan, standard_model()).answer, ScanAnswer::Rewrite);
}

TEST(ScanVerdict, TheModelDecidesToo) {
  ScanFindings scan;
  ModelCheck unsupported;
  unsupported.found = true;
  unsupported.reason = "model type 'mistral': sliding-window attention";
  EXPECT_EQ(judge_scan(scan, unsupported).answer, ScanAnswer::Rewrite);
  EXPECT_EQ(judge_scan(scan, ModelCheck{}).answer, ScanAnswer::NeedsChanges);  // none recognised
  ModelCheck gap = standard_model();
  gap.coverage->gaps.push_back({"matmul", DType::BF16, Route::Emulated, {}, 10, 0.9});
  EXPECT_EQ(judge_scan(scan, gap).answer, ScanAnswer::NeedsChanges);
  ModelCheck unsized = standard_model();
  unsized.missing = {"n_layer", "block_size"};
  EXPECT_EQ(judge_scan(scan, unsized).answer, ScanAnswer::NeedsChanges);
  ModelCheck refused = standard_model();
  refused.coverage.reset();
  refused.config_error = "key 'model.n_head' must divide n_embd";
  EXPECT_EQ(judge_scan(scan, refused).answer, ScanAnswer::NeedsChanges);
}

TEST(ScanVerdict, UnreadableFilesAreNotAQuickSwitch) {
  ScanFindings scan;
  scan.unreadable = {{"legacy.py", "not valid Python 3"}};
  EXPECT_EQ(judge_scan(scan, standard_model()).answer, ScanAnswer::NeedsChanges);
}

TEST(ScanFindingsDocument, ABadSeverityNamesTheFinding) {
  nlohmann::json document{{"root", "p"}, {"files_scanned", 1}, {"lines_scanned", 1}, {"rule_sets", nlohmann::json::array()},
                          {"unreadable", nlohmann::json::array()}, {"model", {{"found", false}, {"reason", "none"}}}};
  nlohmann::json item{{"file", "a.py"}, {"start_line", 1}, {"end_line", 1}, {"api", "x"}, {"category", "cuda"},
                      {"severity", "fatal"}, {"reason", "r"}, {"tip", "t"}, {"rule_set", "cuda"}};
  document["findings"] = nlohmann::json::array({item});
  try {
    read_scan_findings(document);
    FAIL() << "a severity outside the four was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("findings[0].severity"), std::string::npos) << error.what();
  }
}

TEST(ScanCsv, FieldsAreQuotedAsRfc4180Says) {
  ScanFindings scan;
  Finding quoted = finding("getattr(torch, \"cuda\")", "change", "dynamic");
  quoted.tip = "ops.backend, ops.device";
  scan.findings = {quoted};
  EXPECT_EQ(scan_csv(scan),
            "File,Start Line,End Line,API,Tips,Category,Severity,Reason\r\n"
            "train.py,3,3,\"getattr(torch, \"\"cuda\"\")\",\"ops.backend, ops.device\",dynamic,change,a reason\r\n");
}

}  // namespace
}  // namespace strata
