// strata ops: the operator-coverage report. For every registered op and each
// requested dtype it says how a backend runs it — its own kernel, the op's
// decomposition into other ops (listed, with their own routes), or the `ref`
// fallback — by asking the same dispatcher that runs training, so the report
// cannot disagree with what a job would do. Given a CONFIG.toml it reports that
// job's training step instead, op by op with its FLOP share, and a verdict
// (train/op_coverage.h).
#include <algorithm>
#include <map>
#include <optional>

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "backends/backends.h"
#include "cli/commands.h"
#include "graph/autocast.h"
#include "train/op_coverage.h"

namespace strata::cli {
namespace {

struct OpsArgs {
  std::string backend = "cpu";
  std::vector<std::string> dtypes{"f64", "f32", "bf16", "f16"};
  bool json = false;
  std::string config;     // a job: its training step's ops instead of the registry's
  std::string precision;  // with a config: precision.compute
  std::vector<std::string> overrides;
};

constexpr std::string_view kMissing = "missing";

struct Part {
  std::string op;
  std::string route;
};

struct Cell {
  std::string route;        // a route_name, or kMissing
  std::vector<Part> parts;  // for a decomposed op: the ops it runs
};

std::string route_text(const std::optional<Route>& route) {
  return route ? std::string(route_name(*route)) : std::string(kMissing);
}

Cell cell_of(Dispatcher& dispatcher, const std::string& op, DType dtype) {
  std::optional<Route> route = dispatcher.route_if_any(op, dtype);
  Cell cell{route_text(route), {}};
  if (route == Route::Decomposed) {
    for (const std::string& part : OpRegistry::global().get(op).decomposes_into) {
      cell.parts.push_back({part, route_text(dispatcher.route_if_any(part, dtype))});
    }
  }
  return cell;
}

std::vector<DType> parse_dtypes(const std::vector<std::string>& names) {
  std::vector<DType> dtypes;
  for (const std::string& name : names) {
    DType dtype = parse_dtype(name);
    if (!is_floating(dtype)) fail("--dtype {}: kernels are chosen by floating dtypes (f64, f32, bf16, f16)", name);
    dtypes.push_back(dtype);
  }
  return dtypes;
}

struct Report {
  std::string backend;
  std::vector<DType> dtypes;
  std::vector<std::string> ops;
  std::map<std::string, std::vector<Cell>> cells;  // per op, one per dtype
  std::vector<std::map<std::string, int>> totals;   // per dtype: route -> count
};

Report build_report(const OpsArgs& args) {
  Report report;
  report.backend = args.backend;
  report.dtypes = parse_dtypes(args.dtypes);
  // Allow: the report only asks, it neither warns nor refuses.
  Dispatcher dispatcher(get_backend(args.backend), get_backend("ref"), FallbackPolicy::Allow);
  report.ops = OpRegistry::global().names();
  report.totals.resize(report.dtypes.size());
  for (const std::string& op : report.ops) {
    for (size_t d = 0; d < report.dtypes.size(); ++d) {
      Cell cell = cell_of(dispatcher, op, report.dtypes[d]);
      ++report.totals[d][cell.route];
      report.cells[op].push_back(std::move(cell));
    }
  }
  return report;
}

const std::vector<std::string> kRouteOrder{"native", "emulated", "decomposed", "ref-fallback", std::string(kMissing)};

void print_text(const Report& report) {
  fmt::print("operator coverage of backend '{}' (emulated: computed in a wider type; ops without a kernel there "
             "decompose or fall back to 'ref')\n",
             report.backend);
  size_t width = std::string("total ref-fallback").size();
  for (const std::string& op : report.ops) width = std::max(width, op.size());
  fmt::print("{:<{}}", "op", width);
  for (DType dtype : report.dtypes) fmt::print(" {:<13}", dtype_name(dtype));
  fmt::print("\n");
  for (const std::string& op : report.ops) {
    fmt::print("{:<{}}", op, width);
    for (const Cell& cell : report.cells.at(op)) fmt::print(" {:<13}", cell.route);
    fmt::print("\n");
  }
  for (const std::string& route : kRouteOrder) {
    fmt::print("{:<{}}", "total " + route, width);
    for (const auto& totals : report.totals) {
      auto found = totals.find(route);
      fmt::print(" {:<13}", found == totals.end() ? 0 : found->second);
    }
    fmt::print("\n");
  }
  bool heading = false;
  for (const std::string& op : report.ops) {
    for (size_t d = 0; d < report.dtypes.size(); ++d) {
      const Cell& cell = report.cells.at(op)[d];
      if (cell.route != route_name(Route::Decomposed)) continue;
      if (!heading) fmt::print("decompositions (the ops each runs, and how):\n");
      heading = true;
      std::vector<std::string> parts;
      for (const Part& part : cell.parts) parts.push_back(fmt::format("{} ({})", part.op, part.route));
      fmt::print("  {} {}: {}\n", op, dtype_name(report.dtypes[d]),
                 parts.empty() ? "(its schema lists no parts)" : fmt::format("{}", fmt::join(parts, ", ")));
    }
  }
}

void print_json(const Report& report) {
  nlohmann::json ops = nlohmann::json::array();
  for (const std::string& op : report.ops) {
    nlohmann::json routes = nlohmann::json::object();
    for (size_t d = 0; d < report.dtypes.size(); ++d) {
      const Cell& cell = report.cells.at(op)[d];
      nlohmann::json entry{{"route", cell.route}};
      if (cell.route == route_name(Route::Decomposed)) {
        entry["into"] = nlohmann::json::array();
        for (const Part& part : cell.parts) entry["into"].push_back({{"op", part.op}, {"route", part.route}});
      }
      routes[std::string(dtype_name(report.dtypes[d]))] = entry;
    }
    ops.push_back({{"op", op}, {"routes", routes}});
  }
  nlohmann::json totals = nlohmann::json::object();
  for (size_t d = 0; d < report.dtypes.size(); ++d) {
    nlohmann::json counts = nlohmann::json::object();
    for (const std::string& route : kRouteOrder) {
      auto found = report.totals[d].find(route);
      counts[route] = found == report.totals[d].end() ? 0 : found->second;
    }
    totals[std::string(dtype_name(report.dtypes[d]))] = counts;
  }
  nlohmann::json dtypes = nlohmann::json::array();
  for (DType dtype : report.dtypes) dtypes.push_back(std::string(dtype_name(dtype)));
  nlohmann::json document{{"backend", report.backend}, {"reference", "ref"}, {"dtypes", dtypes},
                          {"ops", ops},                {"totals", totals}};
  fmt::print("{}\n", document.dump(2));
}

// The config's training step: --backend and --precision override ops.backend and precision.compute.
void run_config_report(const OpsArgs& args, bool backend_given) {
  std::vector<std::string> overrides = args.overrides;
  if (backend_given) overrides.push_back("ops.backend=" + args.backend);
  TrainConfig config = load_train_config(args.config, overrides);
  if (!args.precision.empty()) {
    config.precision = std::string(dtype_name(parse_precision_mode(args.precision, "--precision")));
  }
  get_backend(config.backend);  // an unknown name fails here, listing the known ones
  ConfigCoverage coverage = config_op_coverage(config);
  if (args.json) {
    nlohmann::json document = coverage_json(coverage);
    document["config"] = args.config;
    fmt::print("{}\n", document.dump(2));
  } else {
    fmt::print("{}", coverage_text(coverage));
  }
}

}  // namespace

void add_ops_command(CLI::App& app) {
  auto* command = app.add_subcommand(
      "ops",
      "Show how a backend runs every op: native, emulated (computed in a wider type), decomposed or ref fallback; "
      "given CONFIG.toml, every op of that job's training step with its FLOP share, and a verdict");
  auto args = std::make_shared<OpsArgs>();
  command->add_option("config", args->config,
                      "A training config: report its training step (the trainer's graph, one process) instead");
  auto* backend =
      command->add_option("--backend", args->backend, "Backend to report on (with a config: overrides ops.backend)")
          ->capture_default_str();
  auto* dtypes = command->add_option("--dtype", args->dtypes, "Comma-separated dtypes (f64, f32, bf16, f16)")
                     ->delimiter(',')
                     ->capture_default_str();
  auto* precision = command->add_option("--precision", args->precision,
                                        "With a config: precision.compute (f32, bf16, f16) instead of the config's");
  auto* set = command->add_option("--set", args->overrides, "With a config: override a config key (key=value; repeatable)")
                  ->allow_extra_args(false);
  command->add_flag("--json", args->json, "Print the report as JSON");
  command->callback([args, backend, dtypes, precision, set] {
    if (!args->config.empty()) {
      if (dtypes->count() > 0) fail("--dtype is for the registry-wide table; with a config give --precision");
      run_config_report(*args, backend->count() > 0);
      return;
    }
    if (precision->count() > 0 || set->count() > 0) fail("--precision and --set need a CONFIG.toml");
    Report report = build_report(*args);
    if (args->json) {
      print_json(report);
    } else {
      print_text(report);
    }
  });
}

}  // namespace strata::cli
