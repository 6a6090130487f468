// strata topo: what the communication layer sees (hwloc's view of this
// machine, the job's ranks per node, the link figures and where they came
// from) and which algorithm the cost model picks per collective and size.
// With --cluster it prices a described cluster instead, without MPI.
#include <map>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include "backends/opencl/opencl_device.h"
#include "cli/commands.h"
#include "comm/cluster_file.h"
#include "comm/communicator.h"
#include "comm/machine.h"
#include "comm/mpi_session.h"

namespace strata::cli {
namespace {

struct TopoArgs {
  std::string cluster;
  bool reprobe = false;
};

std::string format_link(const comm::LinkLevel& link) {
  return fmt::format("{:.2f} us, {:.2f} GB/s", link.latency_s * 1e6, link.bandwidth_Bps / 1e9);
}

std::string format_size(double bytes) {
  if (bytes >= double(1 << 30)) return fmt::format("{:g} GiB", bytes / double(1 << 30));
  if (bytes >= double(1 << 20)) return fmt::format("{:g} MiB", bytes / double(1 << 20));
  if (bytes >= double(1 << 10)) return fmt::format("{:g} KiB", bytes / double(1 << 10));
  return fmt::format("{:g} B", bytes);
}

std::string format_choices(const comm::TopologyDesc& topology, const comm::ModelOptions& model) {
  std::string text = fmt::format("algorithm choices of the cost model (f32; predicted time):\n  {:>9}", "size");
  for (comm::Collective op : comm::kCollectives) text += fmt::format("  {:<26}", comm::collective_name(op));
  text += "\n";
  for (double bytes = 1024; bytes <= double(size_t{1} << 30); bytes *= 16) {
    text += fmt::format("  {:>9}", format_size(bytes));
    for (comm::Collective op : comm::kCollectives) {
      comm::Choice choice = comm::choose_algorithm({op, bytes, DType::F32}, topology, model);
      text += fmt::format("  {:<26}", fmt::format("{} {:.1f} us", comm::algorithm_name(choice.algorithm),
                                                  choice.predicted_s * 1e6));
    }
    text += "\n";
  }
  return text;
}

std::string format_links(const comm::TopologyDesc& topology) {
  std::string text = fmt::format("  intra-node: {}\n", format_link(topology.intra));
  if (topology.nodes > 1) text += fmt::format("  inter-node: {} (per node link)\n", format_link(topology.inter));
  text += fmt::format("  reduce: {:.2f} GB/s per rank\n", topology.reduce_Bps / 1e9);
  return text;
}

// The accelerators `ops.backend = "opencl"` can run on, numbered as `ops.device` counts them.
std::string format_opencl_devices() {
  const std::vector<opencl::DeviceInfo> devices = opencl::list_devices();
  if (devices.empty()) return "OpenCL devices: none (no OpenCL driver reports one)\n";
  std::string text = "OpenCL devices (ops.backend = \"opencl\", ops.device = index or name):\n";
  for (const opencl::DeviceInfo& device : devices) {
    text += fmt::format("  {}: {} ({}; {}, driver {}), {} compute units, {} memory, largest buffer {}{}{}\n",
                        device.index, device.name, device.platform, device.version, device.driver_version,
                        device.compute_units, format_size(static_cast<double>(device.memory_bytes)),
                        format_size(static_cast<double>(device.max_allocation)), device.fp16 ? ", fp16" : "",
                        device.fp64 ? ", fp64" : "");
  }
  return text;
}

void describe_cluster(const std::string& path) {
  comm::ClusterDescription description = comm::load_cluster_description(path);
  const comm::TopologyDesc& topology = description.topology;
  fmt::print("described cluster {}: {} node(s) x {} rank(s)\n", path, topology.nodes, topology.ranks_per_node);
  fmt::print("{}", format_links(topology));
  comm::ModelOptions model;
  model.calibration = description.calibration;
  fmt::print("{}", format_choices(topology, model));
}

void describe_job(const TopoArgs& args) {
  comm::MpiSession mpi;
  comm::CommConfig config = comm::CommConfig::from_environment();
  if (args.reprobe) config.reprobe = true;
  comm::Communicator world = comm::Communicator::world(config);
  if (world.rank() != 0) return;
  fmt::print("{}", comm::format_machine(comm::discover_machine()));
  fmt::print("{}", format_opencl_devices());
  fmt::print("job: {} rank(s) on {} node(s)\n", world.size(), world.nodes());
  std::map<int, std::vector<int>> members;
  for (int rank = 0; rank < world.size(); ++rank) members[world.node_of(rank)].push_back(rank);
  for (const auto& [node, ranks] : members) {
    fmt::print("  node {} ({}): ranks {}\n", node, world.hostname_of(ranks.front()),
               fmt::join(ranks, ","));
  }
  const comm::LinkSource& source = world.link_source();
  fmt::print("links ({}{}):\n", source.kind, source.path.empty() ? "" : " " + source.path);
  fmt::print("{}", format_links(world.topology()));
  fmt::print("{}", format_choices(world.topology(), world.model()));
}

}  // namespace

void add_topo_command(CLI::App& app) {
  auto* command = app.add_subcommand("topo", "Show the machine, ranks per node, links and algorithm choices");
  auto args = std::make_shared<TopoArgs>();
  command->add_option("--cluster", args->cluster, "Price a described cluster (TOML) instead of this job")
      ->check(CLI::ExistingFile);
  command->add_flag("--reprobe", args->reprobe, "Measure the links again even if a cached probe exists");
  command->callback([args] {
    if (!args->cluster.empty()) {
      describe_cluster(args->cluster);
    } else {
      describe_job(*args);
    }
  });
}

}  // namespace strata::cli
