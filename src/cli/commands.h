#pragma once
// Each `strata` subcommand lives in its own file and adds itself here.
#include <CLI/CLI.hpp>

namespace strata::cli {

void add_train_command(CLI::App& app);
void add_sample_command(CLI::App& app);
void add_data_command(CLI::App& app);
void add_topo_command(CLI::App& app);
void add_comm_bench_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_calibrate_command(CLI::App& app);
void add_fit_device_command(CLI::App& app);
void add_ops_command(CLI::App& app);
void add_ckpt_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_compare_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_scan_command(CLI::App& app);

}  // namespace strata::cli
