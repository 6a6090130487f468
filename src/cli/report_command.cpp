// strata report: one self-contained HTML page about one or more finished (or running) training
// runs: their curves overlaid, their configs' differences, the planner's prediction against the
// measured step time and the end-of-run op summary (src/report/); with --scan, a `strata scan`
// of the project being moved as the first section.
#include <filesystem>

#include <fmt/core.h>

#include "cli/commands.h"
#include "core/error.h"
#include "core/file_io.h"
#include "report/html_renderer.h"
#include "report/report_document.h"
#include "report/scan_section.h"

namespace strata::cli {
namespace {

struct ReportArgs {
  std::vector<std::string> run_dirs;
  std::string out = "report.html";
  std::string scan;  // a `strata scan --format json` document
};

void write_report(const ReportArgs& args) {
  std::vector<std::filesystem::path> dirs(args.run_dirs.begin(), args.run_dirs.end());
  if (dirs.empty() && args.scan.empty()) fail("strata report: give run directories, --scan SCAN.json, or both");
  std::vector<RunRecord> runs;
  for (const std::filesystem::path& dir : dirs) runs.push_back(read_run(dir));
  nlohmann::json document = runs.empty() ? nlohmann::json{{"runs", nlohmann::json::array()}}
                                         : report_document(runs, run_labels(dirs));
  if (!args.scan.empty()) document["scan"] = scan_section(args.scan);
  const std::string html = render_report_html(document);
  write_file_atomic(args.out, html);
  fmt::print("wrote {} ({} run{}{}, {:.0f} KiB)\n", args.out, runs.size(), runs.size() == 1 ? "" : "s",
             args.scan.empty() ? "" : " and a scan", static_cast<double>(html.size()) / 1024);
}

}  // namespace

void add_report_command(CLI::App& app) {
  auto* command = app.add_subcommand(
      "report",
      "Write one self-contained HTML page about training runs: loss, validation loss, learning rate, gradient norm, "
      "tokens/s and loss scale against step (runs overlaid), the configs' differences, predicted against measured "
      "step time, and the end-of-run op summary; with --scan, a project's migration scan first");
  auto args = std::make_shared<ReportArgs>();
  command->add_option("run_dirs", args->run_dirs, "Run directories (checkpoint.dir of strata train)");
  command->add_option("--scan", args->scan,
                      "A project scan (strata scan PATH --format json --out SCAN.json), shown as the first section");
  command->add_option("--out,-o", args->out, "The HTML file to write (replaced atomically)")->capture_default_str();
  command->callback([args] { write_report(*args); });
}

}  // namespace strata::cli
