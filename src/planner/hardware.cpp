#include "planner/hardware.h"

#include <cmath>

#include "core/error.h"
#include "core/file_io.h"
#include "core/toml_reader.h"
#include "ops/schema.h"

namespace strata {

namespace {

// Every figure of a device or link is `key = { value = ..., source = "..." }`:
// a planner whose numbers cannot be traced cannot be trusted, so a bare value
// is refused. Returns the reader of the inline table, its source checked.
TomlReader sourced(const TomlReader& fields, const std::string& key) {
  if (fields.has(key) && !fields.has_table(key)) {
    fields.fail_key(key, "gives no source: write { value = ..., source = \"the datasheet, paper or measurement "
                         "it comes from\" }");
  }
  TomlReader figure = fields.table(key);
  figure.only({"value", "source"});
  figure.non_empty_string("source");
  return figure;
}

double positive(const TomlReader& fields, const std::string& key) { return sourced(fields, key).positive("value"); }
double non_negative(const TomlReader& fields, const std::string& key) {
  return sourced(fields, key).non_negative("value");
}
double fraction(const TomlReader& fields, const std::string& key) { return sourced(fields, key).fraction("value"); }
int64_t count(const TomlReader& fields, const std::string& key) { return sourced(fields, key).integer("value", 1); }

std::vector<GemmTile> read_tiles(const TomlReader& fields, const std::string& key) {
  TomlReader figure = sourced(fields, key);
  std::vector<GemmTile> tiles;
  for (const std::vector<double>& row : figure.rows("value", {"rows", "columns", "efficiency"})) {
    GemmTile tile{static_cast<int64_t>(row[0]), static_cast<int64_t>(row[1]), row[2]};
    bool whole = tile.rows >= 1 && tile.columns >= 1 && static_cast<double>(tile.rows) == row[0] &&
                 static_cast<double>(tile.columns) == row[1];
    if (!whole) figure.fail_key("value", fmt::format("tile {}: rows and columns must be positive integers", tiles.size()));
    if (!(tile.efficiency > 0 && tile.efficiency <= 1)) {
      figure.fail_key("value", fmt::format("tile {}: efficiency must be in (0, 1], got {}", tiles.size(), row[2]));
    }
    tiles.push_back(tile);
  }
  if (tiles.empty()) figure.fail_key("value", "must list at least one [rows, columns, efficiency] tile");
  return tiles;
}

std::vector<std::pair<int64_t, double>> read_alignment(const TomlReader& fields, const std::string& key) {
  TomlReader figure = sourced(fields, key);
  std::vector<std::pair<int64_t, double>> levels;
  for (const std::vector<double>& row : figure.rows("value", {"elements", "efficiency"})) {
    const auto elements = static_cast<int64_t>(row[0]);
    if (elements < 1 || static_cast<double>(elements) != row[0]) {
      figure.fail_key("value", fmt::format("entry {}: elements must be a positive integer", levels.size()));
    }
    if (!levels.empty() && (elements >= levels.back().first || levels.back().first % elements != 0)) {
      figure.fail_key("value", fmt::format("entry {}: alignments must narrow, each dividing the one before",
                                           levels.size()));
    }
    if (!(row[1] > 0 && row[1] <= 1)) {
      figure.fail_key("value", fmt::format("entry {}: efficiency must be in (0, 1], got {}", levels.size(), row[1]));
    }
    levels.emplace_back(elements, row[1]);
  }
  if (levels.empty() || levels.back().first != 1) {
    figure.fail_key("value", "must end with [1, efficiency] (every shape is aligned to one element)");
  }
  return levels;
}

const std::set<std::string> kEngineKeys = {
    "matrix_tflops",        "compute_units",         "gemm_tiles",
    "gemm_k_step",          "gemm_tile_overhead_us", "gemm_alignment",
    "attention_efficiency", "attention_backward_efficiency",
    "attention_block_rows", "attention_head_dim_step", "attention_head_dims", "attention_tile_overhead_us",
    "sustained_matrix_tflops"};

// `attention_head_dims`: positive and ascending.
std::vector<int64_t> read_head_dims(const TomlReader& fields) {
  TomlReader figure = sourced(fields, "attention_head_dims");
  std::vector<int64_t> dims = figure.integers("value");
  if (dims.empty()) figure.fail_key("value", "must list at least one head dim");
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] < 1 || (i > 0 && dims[i] <= dims[i - 1])) {
      figure.fail_key("value", fmt::format("entry {}: head dims must be positive and ascending, got {}", i, dims[i]));
    }
  }
  return dims;
}

// The figures of a fused-attention kernel that differ between libraries on one device; its tiling (query rows
// per tile, head-dim step) is the device's engine's. The head dims its kernels are built for are its own.
AttentionEngine read_attention(const TomlReader& fields, AttentionEngine engine) {
  engine.forward_efficiency = fraction(fields, "attention_efficiency");
  engine.backward_efficiency = fraction(fields, "attention_backward_efficiency");
  engine.tile_overhead_s = non_negative(fields, "attention_tile_overhead_us") * 1e-6;
  if (fields.has("attention_head_dims")) engine.head_dims = read_head_dims(fields);
  return engine;
}

// A matrix engine's peaks and GEMM engine (matrix_tflops, sustained_matrix_tflops, compute_units, gemm_*), into `perf`.
void read_matrix_engine(const TomlReader& fields, DTypePerformance& perf) {
  perf.matrix_flops = positive(fields, "matrix_tflops") * 1e12;
  if (fields.has("sustained_matrix_tflops")) {
    perf.sustained_matrix_flops = positive(fields, "sustained_matrix_tflops") * 1e12;
    if (perf.sustained_matrix_flops > perf.matrix_flops) {
      fields.fail_range("sustained_matrix_tflops", fmt::format("at most matrix_tflops ({})", perf.matrix_flops / 1e12),
                        perf.sustained_matrix_flops / 1e12);
    }
  }
  GemmEngine& gemm = perf.gemm;
  gemm.compute_units = static_cast<int>(count(fields, "compute_units"));
  gemm.tiles = read_tiles(fields, "gemm_tiles");
  gemm.k_step = count(fields, "gemm_k_step");
  gemm.tile_overhead_s = non_negative(fields, "gemm_tile_overhead_us") * 1e-6;
  gemm.alignment = read_alignment(fields, "gemm_alignment");
}

DTypePerformance read_dtype(const TomlReader& fields) {
  std::set<std::string> allowed = kEngineKeys;
  allowed.insert({"vector_tflops", "op_efficiency", "attention_libraries"});
  fields.only(allowed);
  DTypePerformance perf;
  perf.vector_flops = positive(fields, "vector_tflops") * 1e12;
  // A dtype only the vector units compute (f32 on an NPU whose matrix engine lacks it) has no matrix figures.
  bool has_matrix = false;
  for (const std::string& key : kEngineKeys) has_matrix = has_matrix || fields.has(key);
  if (has_matrix) {
    read_matrix_engine(fields, perf);
    AttentionEngine tiling;
    tiling.block_rows = count(fields, "attention_block_rows");
    tiling.head_dim_step = count(fields, "attention_head_dim_step");
    perf.attention = read_attention(fields, tiling);
    TomlReader libraries = fields.table("attention_libraries", false);
    for (const std::string& name : libraries.keys()) {
      TomlReader library = libraries.table(name);
      library.only({"attention_efficiency", "attention_backward_efficiency", "attention_tile_overhead_us",
                    "attention_head_dims"});
      perf.attention_libraries[name] = read_attention(library, tiling);
    }
  } else if (fields.has("attention_libraries")) {
    fields.fail_key("attention_libraries", "needs the matrix engine's figures (attention runs on it)");
  }
  TomlReader ops = fields.table("op_efficiency", false);
  for (const std::string& op : ops.keys()) {
    if (!OpRegistry::global().contains(op)) ops.fail_key(op, "is not an op");
    perf.op_efficiency[op] = positive(ops, op);
  }
  return perf;
}

// [device.fp8]: the float8 matrix engine float8 linears run on (GEMM figures only: nothing else computes in fp8).
DTypePerformance read_fp8_engine(const TomlReader& fields) {
  fields.only({"matrix_tflops", "sustained_matrix_tflops", "compute_units", "gemm_tiles", "gemm_k_step",
               "gemm_tile_overhead_us", "gemm_alignment"});
  DTypePerformance perf;
  read_matrix_engine(fields, perf);
  return perf;
}

DeviceSpec read_device(const TomlReader& fields) {
  const std::set<std::string> dtype_names = {"f64", "f32", "bf16", "f16"};
  std::set<std::string> allowed = {
      "name",           "memory_gib",           "reserved_gib", "memory_bandwidth_gbps", "memory_efficiency",
      "op_overhead_us", "comm_compute_slowdown", "fp8"};
  allowed.insert(dtype_names.begin(), dtype_names.end());
  fields.only(allowed);
  DeviceSpec device;
  device.name = fields.non_empty_string("name");
  device.memory_bytes = positive(fields, "memory_gib") * kGiB;
  device.reserved_bytes = non_negative(fields, "reserved_gib") * kGiB;
  if (device.reserved_bytes >= device.memory_bytes) {
    fields.fail_range("reserved_gib", fmt::format("less than memory_gib ({})", device.memory_bytes / kGiB),
                      device.reserved_bytes / kGiB);
  }
  device.memory_bandwidth_Bps = positive(fields, "memory_bandwidth_gbps") * kGB;
  device.memory_efficiency = fraction(fields, "memory_efficiency");
  device.op_overhead_s = non_negative(fields, "op_overhead_us") * 1e-6;
  if (fields.has("comm_compute_slowdown")) {
    device.comm_compute_slowdown = non_negative(fields, "comm_compute_slowdown");
    if (device.comm_compute_slowdown >= 1) fields.fail_range("comm_compute_slowdown", "below 1", device.comm_compute_slowdown);
  }
  for (const std::string& name : dtype_names) {
    if (fields.has(name)) device.dtypes[parse_dtype(name)] = read_dtype(fields.table(name));
  }
  if (device.dtypes.empty()) {
    fail("{}: [device] lists no dtype table such as [device.bf16] or [device.f32]", fields.source());
  }
  if (fields.has("fp8")) device.fp8 = read_fp8_engine(fields.table("fp8"));
  return device;
}

LinkSpec read_link(const TomlReader& fields, const std::string& bandwidth_key) {
  LinkSpec link;
  link.bandwidth_Bps = positive(fields, bandwidth_key) * kGB;
  link.latency_s = non_negative(fields, "latency_us") * 1e-6;
  return link;
}

// The source of every `{ value, source }` figure of the file, by the figure's full dotted key.
std::map<std::string, std::string> read_figure_sources(const TomlReader& fields) {
  const std::string suffix = ".source";
  std::map<std::string, std::string> sources;
  for (const auto& [dotted, text] : fields.leaf_texts()) {
    if (dotted.size() <= suffix.size() || dotted.compare(dotted.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const std::string figure = dotted.substr(0, dotted.size() - suffix.size());
    TomlReader table = fields;
    size_t start = 0;
    for (size_t dot = figure.find('.'); ; dot = figure.find('.', start)) {
      table = table.table(figure.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    sources[figure] = table.string("source");
  }
  return sources;
}

}  // namespace

double GemmEngine::alignment_efficiency(int64_t n, int64_t k) const {
  for (const auto& [elements, efficiency] : alignment) {
    if (n % elements == 0 && k % elements == 0) return efficiency;
  }
  return alignment.back().second;
}

std::optional<int64_t> AttentionEngine::kernel_head_dim(int64_t head_dim) const {
  if (head_dims.empty()) return (head_dim + head_dim_step - 1) / head_dim_step * head_dim_step;
  for (int64_t built : head_dims) {
    if (built >= head_dim) return built;
  }
  return std::nullopt;
}

const DTypePerformance& DeviceSpec::performance(DType dtype) const {
  auto found = dtypes.find(dtype);
  if (found == dtypes.end()) {
    std::string known;
    for (const auto& [d, perf] : dtypes) known += (known.empty() ? "" : ", ") + std::string(dtype_name(d));
    fail("device '{}' has no figures for dtype {} (it lists: {})", name, dtype_name(dtype), known);
  }
  return found->second;
}

const DTypePerformance& DeviceSpec::fp8_performance() const {
  if (!fp8) fail("device '{}' has no float8 matrix engine (no [device.fp8] table): float8 linears cannot run on it", name);
  return *fp8;
}

void DeviceSpec::use_attention_library(DType dtype, const std::string& library) {
  performance(dtype);  // names the dtypes there are when this one is not
  DTypePerformance& perf = dtypes.at(dtype);
  auto found = perf.attention_libraries.find(library);
  if (found == perf.attention_libraries.end()) {
    std::string known;
    for (const auto& entry : perf.attention_libraries) known += (known.empty() ? "" : ", ") + entry.first;
    fail("device '{}' describes no attention library '{}' in {} (it describes: {})", name, library,
         dtype_name(dtype), known.empty() ? "none" : known);
  }
  perf.attention = found->second;
}

void ClusterSpec::validate() const {
  auto positive = [&](const char* key, double value) {
    if (!(value > 0) || !std::isfinite(value)) fail("{}: {} must be positive, got {}", source, key, value);
  };
  if (nodes < 1) fail("{}: cluster.nodes must be at least 1, got {}", source, nodes);
  if (devices_per_node < 1) fail("{}: cluster.devices_per_node must be at least 1, got {}", source, devices_per_node);
  positive("device.memory", device.usable_memory_bytes());
  positive("device.memory_bandwidth", device.memory_bandwidth_Bps);
  if (devices_per_node > 1) positive("intra_node.bandwidth", intra_node.bandwidth_Bps);
  if (nodes > 1) {
    positive("inter_node.nic_bandwidth", nic.bandwidth_Bps);
    if (nics_per_node < 1) fail("{}: inter_node.nics_per_node must be at least 1, got {}", source, nics_per_node);
  }
  if (device.dtypes.empty()) fail("{}: the device lists no dtype", source);
}

ClusterSpec parse_cluster(const std::string& toml_text, const std::string& source) {
  return read_cluster(TomlReader::parse(toml_text, source));
}

ClusterSpec read_cluster(const TomlReader& fields) {
  const std::string& source = fields.source();
  if (fields.has("measured")) {
    fail("{}: a calibrated cluster file ([measured]) describes this machine per processes x threads; read it "
         "through the planner's resolve_cluster",
         source);
  }
  fields.only({"cluster", "device", "intra_node", "inter_node"});

  ClusterSpec spec;
  spec.source = source;
  TomlReader cluster = fields.table("cluster");
  cluster.only({"name", "nodes", "devices_per_node", "collectives"});
  spec.name = cluster.non_empty_string("name");
  spec.nodes = static_cast<int>(cluster.integer("nodes", 1));
  spec.devices_per_node = static_cast<int>(cluster.integer("devices_per_node", 1));
  if (cluster.has("collectives")) {
    spec.collectives = cluster.non_empty_string("collectives");
    if (spec.collectives != "strata" && spec.collectives != "nccl" && spec.collectives != "hccl") {
      cluster.fail_key("collectives", fmt::format("must be strata, nccl or hccl, got '{}'", spec.collectives));
    }
  }

  spec.device = read_device(fields.table("device"));

  TomlReader intra = fields.table("intra_node", spec.devices_per_node > 1);
  if (spec.devices_per_node > 1 || intra.has("bandwidth_gbps")) {
    intra.only({"bandwidth_gbps", "latency_us"});
    spec.intra_node = read_link(intra, "bandwidth_gbps");
  }
  TomlReader inter = fields.table("inter_node", spec.nodes > 1);
  if (spec.nodes > 1 || inter.has("nic_bandwidth_gbps")) {
    inter.only({"nics_per_node", "nic_bandwidth_gbps", "latency_us"});
    spec.nics_per_node = static_cast<int>(count(inter, "nics_per_node"));
    spec.nic = read_link(inter, "nic_bandwidth_gbps");
  }
  spec.figure_sources = read_figure_sources(fields);
  spec.validate();
  return spec;
}

ClusterSpec load_cluster(const std::filesystem::path& path) {
  return parse_cluster(read_text_file(path), path.string());
}

}  // namespace strata
