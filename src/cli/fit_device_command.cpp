// strata fit-device MEASUREMENTS CLUSTER: fits a cluster description's device
// to kernel times measured on it (bench/planner/gpu/measure_kernels.py), writes
// the description back with every fitted figure's source naming the
// measurements, and prints how well the one device model predicts each
// measured kernel (planner/device_fit.h).
#include <fmt/core.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include <toml++/toml.h>

#include "cli/commands.h"
#include "core/error.h"
#include "core/file_io.h"
#include "planner/device_fit.h"

namespace strata::cli {

namespace {

struct FitDeviceArgs {
  std::string measurements;
  std::string cluster;
  std::string out;
  std::string report;
  std::string attention_backend = "cudnn";
  bool keep_memory = false;
  std::string sustained;
};

toml::table figure(toml::node&& value, const std::string& source) {
  toml::table table{{"value", std::move(value)}, {"source", source}};
  table.is_inline(true);
  return table;
}

toml::table& dtype_table(toml::table& file, DType dtype) {
  toml::table* table = file["device"][std::string(dtype_name(dtype))].as_table();
  STRATA_CHECK(table != nullptr, "no dtype table to write");
  return *table;
}

// The fitted figures of one dtype, into its table of the description.
void write_engine(toml::table& table, const DTypePerformance& perf, const std::string& gemm_source,
                  const std::string& attention_source) {
  toml::array tiles;
  for (const GemmTile& tile : perf.gemm.tiles) {
    tiles.push_back(toml::array{tile.rows, tile.columns, tile.efficiency});
  }
  table.insert_or_assign("gemm_tiles", figure(std::move(tiles), gemm_source + "; tile shapes from the description"));
  table.insert_or_assign("gemm_tile_overhead_us", figure(toml::value(perf.gemm.tile_overhead_s * 1e6), gemm_source));
  toml::array alignment;
  for (const auto& [elements, efficiency] : perf.gemm.alignment) alignment.push_back(toml::array{elements, efficiency});
  table.insert_or_assign("gemm_alignment",
                         figure(std::move(alignment), gemm_source + "; alignment levels from the description"));
  table.insert_or_assign("attention_efficiency", figure(toml::value(perf.attention.forward_efficiency), attention_source));
  table.insert_or_assign("attention_backward_efficiency",
                         figure(toml::value(perf.attention.backward_efficiency), attention_source));
  table.insert_or_assign("attention_tile_overhead_us",
                         figure(toml::value(perf.attention.tile_overhead_s * 1e6), attention_source));
}

// The description's leading comment lines, kept above the rewritten tables.
std::string header_of(const std::string& text) {
  std::istringstream lines(text);
  std::string line, header;
  while (std::getline(lines, line) && (line.empty() || line[0] == '#')) header += line + "\n";
  return header;
}

void print_comparison(const DeviceFit& fit) {
  std::map<std::string, std::vector<double>> errors;
  std::map<std::string, size_t> fitted;
  for (const KernelComparison& k : fit.kernels) {
    const std::string group = fmt::format("{} {} {}", k.kind, dtype_name(k.dtype), k.set);
    errors[group].push_back(std::abs(k.predicted_s / k.measured_s - 1));
    if (k.fitted) ++fitted[group];
  }
  fmt::print("{:<32} {:>7} {:>7} {:>14} {:>11}\n", "kernels", "count", "fitted", "median |error|", "max |error|");
  for (auto& [group, e] : errors) {
    std::sort(e.begin(), e.end());
    fmt::print("{:<32} {:>7} {:>7} {:>13.1f}% {:>10.1f}%\n", group, e.size(), fitted[group], 100 * e[e.size() / 2],
               100 * e.back());
  }
}

void write_report(const std::string& path, const DeviceFit& fit) {
  std::ostringstream csv;
  csv << "kind,set,shape,dtype,measured_s,predicted_s,error,fitted\n";
  for (const KernelComparison& k : fit.kernels) {
    csv << fmt::format("{},{},{},{},{:.6g},{:.6g},{:.4f},{}\n", k.kind, k.set, k.what, dtype_name(k.dtype),
                       k.measured_s, k.predicted_s, k.predicted_s / k.measured_s - 1, k.fitted ? 1 : 0);
  }
  write_file_atomic(path, csv.str());
}

void fit_device_command(const FitDeviceArgs& args) {
  const KernelMeasurements measured = load_kernel_measurements(args.measurements);
  const std::string text = read_text_file(args.cluster);
  const ClusterSpec base = parse_cluster(text, args.cluster);
  DeviceFitOptions options;
  options.attention_backend = args.attention_backend;
  options.memory = !args.keep_memory;
  std::optional<SustainedMeasurement> sustained;
  if (!args.sustained.empty()) {
    sustained = load_sustained_measurement(args.sustained);
    options.sustained_matrix_flops = sustained->sustained_flops;
    options.sustained_dtype = sustained->dtype;
  }
  const DeviceFit fit = fit_device(base.device, measured, options);

  toml::table file = toml::parse(text, args.cluster);
  const std::string where = fmt::format("fitted by `strata fit-device` to {} ({})", args.measurements, measured.device);
  const FitQuality& attention = fit.attention;
  const std::string attention_source =
      fmt::format("{}: {} {} attention kernels, median |error| {:.1f}%", where, attention.samples,
                  args.attention_backend, 100 * attention.median_abs_error);
  for (const auto& [dtype, quality] : fit.gemm) {
    const std::string gemm_source = fmt::format("{}: {} {} GEMMs, median |error| {:.1f}%", where,
                                                fit.gemm_samples.at(dtype), dtype_name(dtype),
                                                100 * quality.median_abs_error);
    const DTypePerformance& perf = fit.device.dtypes.at(dtype);
    write_engine(dtype_table(file, dtype), perf, gemm_source,
                 dtype == DType::BF16 ? attention_source : "the description's own (attention is measured in bf16)");
    if (dtype == DType::BF16 && base.device.computes(DType::F16) && !fit.gemm.count(DType::F16)) {
      write_engine(dtype_table(file, DType::F16), fit.device.dtypes.at(DType::F16),
                   gemm_source + " (f16 runs on the same tensor cores as bf16)", attention_source);
    }
  }
  if (sustained) {
    const std::string source = fmt::format(
        "measured by bench/planner/gpu/measure_sustained.py: {} ({}), {} GEMM shapes of a large layer back to back "
        "for {:g} s, the mean over the last third",
        sustained->source, sustained->device, sustained->shapes, sustained->seconds);
    std::vector<DType> dtypes{sustained->dtype};
    const bool f16_shares = sustained->dtype == DType::BF16 && base.device.computes(DType::F16) &&
                            fit.gemm.count(DType::BF16) && !fit.gemm.count(DType::F16);
    if (f16_shares) dtypes.push_back(DType::F16);
    for (DType dtype : dtypes) {
      dtype_table(file, dtype).insert_or_assign(
          "sustained_matrix_tflops",
          figure(toml::value(fit.device.dtypes.at(dtype).sustained_matrix_flops / 1e12),
                 source + (dtype == sustained->dtype ? "" : " (f16 runs on the same tensor cores as bf16)")));
    }
  }
  if (options.memory) {
    file["device"].as_table()->insert_or_assign(
        "memory_efficiency",
        figure(toml::value(fit.memory_efficiency),
               fmt::format("{}: median share of the datasheet bandwidth large copies and adds reached", where)));
  }
  for (const auto& [dtype, ops] : fit.op_efficiency) {
    if (!base.device.dtypes.count(dtype)) continue;
    toml::table figures;
    for (const auto& [op, efficiency] : ops) {
      figures.insert(op, figure(toml::value(efficiency),
                                fmt::format("{}: the op's ideal traffic at the rate large copies and adds reached, over "
                                            "its measured time (median over tensors of 256 MB and more{})",
                                            where, dtype == DType::F16 ? "; f16 takes bf16's" : "")));
    }
    dtype_table(file, dtype).insert_or_assign("op_efficiency", std::move(figures));
  }
  std::ostringstream body;
  body << toml::toml_formatter(file);
  const std::string out = args.out.empty() ? args.cluster : args.out;
  write_file_atomic(out, header_of(text) + "\n" + body.str() + "\n");

  fmt::print("{} fitted to {} ({} GEMM, {} attention, {} memory-op measurements; compute units {} measured, {} in the "
             "description)\n",
             base.device.name, measured.device, fit.gemm.begin()->second.samples, attention.samples,
             measured.memory_ops.size(), measured.compute_units, base.device.performance(fit.gemm.begin()->first).gemm.compute_units);
  print_comparison(fit);
  if (!args.report.empty()) write_report(args.report, fit);
  fmt::print("wrote {}\n", out);
}

}  // namespace

void add_fit_device_command(CLI::App& app) {
  auto* command = app.add_subcommand(
      "fit-device", "Fit a cluster description's device to kernel times measured on it, and compare every kernel");
  auto args = std::make_shared<FitDeviceArgs>();
  command->add_option("measurements", args->measurements, "JSON of bench/planner/gpu/measure_kernels.py")
      ->required()
      ->check(CLI::ExistingFile);
  command->add_option("cluster", args->cluster, "Cluster TOML whose device was measured (its structure is kept)")
      ->required()
      ->check(CLI::ExistingFile);
  command->add_option("--out", args->out, "Where to write the fitted description (default: over CLUSTER)");
  command->add_option("--report", args->report, "CSV of every measured kernel, predicted against measured");
  command->add_option("--attention-backend", args->attention_backend, "Which measured attention kernel to fit (cudnn, flash)");
  command->add_flag("--keep-memory", args->keep_memory,
                    "Keep the description's memory efficiency (the measured device has other memory)");
  command->add_option("--sustained", args->sustained,
                      "JSON of bench/planner/gpu/measure_sustained.py: the matrix rate the device holds at its power "
                      "limit, which no GEMM is priced above (the tiles are fitted below it)")
      ->check(CLI::ExistingFile);
  command->callback([args] { fit_device_command(*args); });
}

}  // namespace strata::cli
