#pragma once
// What hwloc finds on this machine: packages, NUMA nodes, cores, hardware
// threads, caches and PCI devices with their OS devices (network interfaces,
// InfiniBand HCAs, GPUs, disks). Printed by `strata topo`.
#include <cstdint>
#include <string>
#include <vector>

namespace strata::comm {

struct PciDevice {
  std::string bus_id;      // "0000:00:04.0"
  std::string kind;        // "network", "storage", "display", "accelerator", ...
  uint16_t vendor_id = 0;
  uint16_t device_id = 0;
  std::string name;        // vendor and device names when hwloc knows them
  float link_gbps = 0.0f;  // PCIe link speed, GB/s (0 when unknown)
  int numa_node = -1;      // nearest NUMA node, -1 when unknown
  std::vector<std::string> os_devices;  // "eth0 (network)", "mlx5_0 (openfabrics)"
};

struct MachineInfo {
  std::string hostname;
  int packages = 0;
  int numa_nodes = 0;
  int cores = 0;
  int hardware_threads = 0;
  uint64_t memory_bytes = 0;
  std::vector<std::pair<int, uint64_t>> caches;  // (level, bytes of one cache) for L1..L3, with counts below
  std::vector<int> cache_counts;
  std::vector<PciDevice> pci_devices;
};

// Throws strata::Error if hwloc cannot load the topology.
MachineInfo discover_machine();
// Bytes of the deepest cache level, all its caches together (0 when hwloc knows none).
uint64_t last_level_cache_bytes(const MachineInfo& machine);
std::string format_machine(const MachineInfo& machine);

}  // namespace strata::comm
