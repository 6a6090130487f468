#include "report/html_renderer.h"

#include <filesystem>
#include <vector>

#include <fmt/ranges.h>

#include "core/error.h"
#include "core/file_io.h"
#include "core/subprocess.h"
#include "report/render_script.h"

namespace strata {

namespace {

// The renderer's exit status when it cannot import matplotlib.
constexpr int kMissingMatplotlib = 3;

}  // namespace

std::string render_report_html(const nlohmann::json& document) {
  const TemporaryDirectory scratch("strata-report");
  const std::filesystem::path document_path = scratch.path() / "report.json";
  write_file_atomic(document_path, document.dump());
  const std::vector<std::string> interpreters = python_interpreters();
  for (const std::string& python : interpreters) {
    ProcessOutcome rendered = run_process({python, "-c", std::string(kRenderReportScript), document_path.string()},
                                          /*capture_stderr=*/false);
    if (rendered.exit_status == kMissingMatplotlib || rendered.exit_status == kProgramNotFound) continue;
    if (rendered.exit_status != 0) {
      fail("strata report: the renderer ('{}' running render_report.py) failed with status {} (its message is above)",
           python, rendered.exit_status);
    }
    return std::move(rendered.output);
  }
  fail("strata report draws its plots with matplotlib, which no Python tried ({}) can run: install it (Debian: "
       "apt-get install python3-matplotlib) or set STRATA_PYTHON to a Python that has it",
       fmt::join(interpreters, ", "));
}

}  // namespace strata
