#include "comm/machine.h"

#include <hwloc.h>
#include <unistd.h>

#include <fmt/format.h>

#include "core/error.h"

namespace strata::comm {
namespace {

std::string pci_kind(unsigned short class_id) {
  switch (class_id >> 8) {
    case 0x01: return "storage";
    case 0x02: return "network";
    case 0x03: return "display";
    case 0x04: return "multimedia";
    case 0x05: return "memory";
    case 0x06: return "bridge";
    case 0x0b: return "processor";
    case 0x0c: return "serial bus";
    case 0x0d: return "wireless";
    case 0x12: return "accelerator";
    default: return "other";
  }
}

std::string osdev_kind(hwloc_obj_osdev_type_t type) {
  switch (type) {
    case HWLOC_OBJ_OSDEV_BLOCK: return "block";
    case HWLOC_OBJ_OSDEV_GPU: return "gpu";
    case HWLOC_OBJ_OSDEV_NETWORK: return "network";
    case HWLOC_OBJ_OSDEV_OPENFABRICS: return "openfabrics";
    case HWLOC_OBJ_OSDEV_DMA: return "dma";
    case HWLOC_OBJ_OSDEV_COPROC: return "coprocessor";
  }
  return "other";
}

std::string info(hwloc_obj_t object, const char* key) {
  const char* value = hwloc_obj_get_info_by_name(object, key);
  return value ? value : "";
}

void collect_os_devices(hwloc_obj_t object, std::vector<std::string>& names) {
  for (hwloc_obj_t child = object->io_first_child; child; child = child->next_sibling) {
    if (child->type == HWLOC_OBJ_OS_DEVICE) {
      names.push_back(fmt::format("{} ({})", child->name ? child->name : "?", osdev_kind(child->attr->osdev.type)));
    }
    collect_os_devices(child, names);
  }
}

class Topology {
 public:
  Topology() {
    if (hwloc_topology_init(&topology_) != 0) fail("hwloc: cannot initialise a topology");
    // I/O devices are filtered out by default; keep the ones that matter (NICs, GPUs, disks).
    hwloc_topology_set_io_types_filter(topology_, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_load(topology_) != 0) {
      hwloc_topology_destroy(topology_);
      fail("hwloc: cannot load this machine's topology");
    }
  }
  ~Topology() { hwloc_topology_destroy(topology_); }
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;
  hwloc_topology_t get() const { return topology_; }

 private:
  hwloc_topology_t topology_ = nullptr;
};

}  // namespace

MachineInfo discover_machine() {
  Topology topology;
  hwloc_topology_t t = topology.get();
  MachineInfo machine;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  machine.hostname = host;
  auto count = [&](hwloc_obj_type_t type) { return std::max(0, hwloc_get_nbobjs_by_type(t, type)); };
  machine.packages = count(HWLOC_OBJ_PACKAGE);
  machine.numa_nodes = count(HWLOC_OBJ_NUMANODE);
  machine.cores = count(HWLOC_OBJ_CORE);
  machine.hardware_threads = count(HWLOC_OBJ_PU);
  for (int i = 0; i < machine.numa_nodes; ++i) {
    hwloc_obj_t node = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    machine.memory_bytes += node->attr->numanode.local_memory;
  }
  for (auto [level, type] : {std::pair{1, HWLOC_OBJ_L1CACHE}, {2, HWLOC_OBJ_L2CACHE}, {3, HWLOC_OBJ_L3CACHE}}) {
    int caches = count(type);
    if (caches == 0) continue;
    hwloc_obj_t first = hwloc_get_obj_by_type(t, type, 0);
    machine.caches.emplace_back(level, first->attr->cache.size);
    machine.cache_counts.push_back(caches);
  }
  for (hwloc_obj_t device = hwloc_get_next_pcidev(t, nullptr); device; device = hwloc_get_next_pcidev(t, device)) {
    const auto& pci = device->attr->pcidev;
    PciDevice entry;
    entry.bus_id = fmt::format("{:04x}:{:02x}:{:02x}.{:01x}", pci.domain, pci.bus, pci.dev, pci.func);
    entry.kind = pci_kind(pci.class_id);
    entry.vendor_id = pci.vendor_id;
    entry.device_id = pci.device_id;
    std::string vendor = info(device, "PCIVendor"), model = info(device, "PCIDevice");
    entry.name = vendor.empty() && model.empty() ? "" : fmt::format("{} {}", vendor, model);
    entry.link_gbps = pci.linkspeed;
    hwloc_obj_t ancestor = hwloc_get_non_io_ancestor_obj(t, device);
    if (ancestor && ancestor->nodeset) {
      int first = hwloc_bitmap_first(ancestor->nodeset);
      if (first >= 0 && hwloc_bitmap_weight(ancestor->nodeset) == 1) entry.numa_node = first;
    }
    collect_os_devices(device, entry.os_devices);
    machine.pci_devices.push_back(std::move(entry));
  }
  return machine;
}

uint64_t last_level_cache_bytes(const MachineInfo& machine) {
  if (machine.caches.empty()) return 0;
  return machine.caches.back().second * static_cast<uint64_t>(machine.cache_counts.back());
}

std::string format_machine(const MachineInfo& machine) {
  std::string text = fmt::format("host {}: {} package(s), {} NUMA node(s), {} core(s), {} hardware thread(s), {:.1f} GiB\n",
                                 machine.hostname, machine.packages, machine.numa_nodes, machine.cores,
                                 machine.hardware_threads, machine.memory_bytes / double(1ull << 30));
  for (size_t i = 0; i < machine.caches.size(); ++i) {
    text += fmt::format("  L{} cache: {} x {} KiB\n", machine.caches[i].first, machine.cache_counts[i],
                        machine.caches[i].second / 1024);
  }
  for (const PciDevice& device : machine.pci_devices) {
    text += fmt::format("  PCI {} {} [{:04x}:{:04x}]", device.bus_id, device.kind, device.vendor_id, device.device_id);
    if (!device.name.empty()) text += " " + device.name;
    if (device.link_gbps > 0) text += fmt::format(", link {:.1f} GB/s", device.link_gbps);
    if (device.numa_node >= 0) text += fmt::format(", NUMA {}", device.numa_node);
    for (const std::string& os : device.os_devices) text += ", " + os;
    text += "\n";
  }
  return text;
}

}  // namespace strata::comm
