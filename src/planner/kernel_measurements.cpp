#include "planner/kernel_measurements.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_file.h"

namespace strata {

namespace {

DType dtype_of(std::string name, const std::string& where) {
  if (name.starts_with("torch.")) name = name.substr(6);  // str() of a torch dtype
  if (name == "bfloat16") return DType::BF16;
  if (name == "float32") return DType::F32;
  if (name == "float16") return DType::F16;
  fail("{}: unknown dtype '{}'", where, name);
}

template <typename T>
T field(const nlohmann::json& record, const char* key, const std::string& where) {
  if (!record.contains(key)) fail("{}: missing '{}'", where, key);
  try {
    return record.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    fail("{}: '{}' has the wrong type ({})", where, key, record.at(key).dump());
  }
}

const nlohmann::json& list(const nlohmann::json& file, const char* key, const std::string& source) {
  if (!file.contains(key) || !file.at(key).is_array()) fail("{}: '{}' must be a list of records", source, key);
  return file.at(key);
}

// The file's JSON, refused unless it says it is `schema` (what `writer` is: the script that writes such files).
nlohmann::json read_measurements(const std::filesystem::path& path, const char* schema, const char* writer) {
  nlohmann::json file = read_json_file(path);
  if (file.value("schema", std::string()) != schema) fail("{}: not {} (schema {})", path.string(), writer, schema);
  return file;
}

}  // namespace

KernelMeasurements load_kernel_measurements(const std::filesystem::path& path) {
  const std::string source = path.string();
  const nlohmann::json file = read_measurements(path, "strata-gpu-kernels-1",
                                                "a kernel measurement file of bench/planner/gpu/measure_kernels.py");
  KernelMeasurements m;
  m.source = source;
  const nlohmann::json& device = file.at("device");
  m.device = field<std::string>(device, "name", source + ": device");
  m.compute_units = field<int>(device, "multi_processor_count", source + ": device");
  m.launch_floor_s = field<double>(file.at("launch").at("add_1_element"), "device_loop_seconds_per_call",
                                   source + ": launch.add_1_element");
  m.gemm_floor_s = field<double>(file.at("launch").at("matmul_8x8x8_bf16"), "device_loop_seconds_per_call",
                                 source + ": launch.matmul_8x8x8_bf16");
  const nlohmann::json& gemms = list(file, "gemm", source);
  for (size_t i = 0; i < gemms.size(); ++i) {
    const std::string where = fmt::format("{}: gemm[{}]", source, i);
    const nlohmann::json& r = gemms[i];
    MeasuredGemm g;
    g.set = field<std::string>(r, "set", where);
    g.tag = r.value("tag", std::string());
    g.sample.shape = {field<int64_t>(r, "batch", where), field<int64_t>(r, "m", where), field<int64_t>(r, "n", where),
                      field<int64_t>(r, "k", where)};
    g.sample.seconds = field<double>(r, "seconds", where);
    m.gemm[dtype_of(field<std::string>(r, "dtype", where), where)].push_back(g);
  }
  const nlohmann::json& attention = list(file, "attention", source);
  for (size_t i = 0; i < attention.size(); ++i) {
    const std::string where = fmt::format("{}: attention[{}]", source, i);
    const nlohmann::json& r = attention[i];
    if (!r.contains("seconds") || r.at("seconds").is_null()) continue;  // a backend that could not run the shape
    MeasuredAttention a;
    a.backend = field<std::string>(r, "backend", where);
    const std::string pass = field<std::string>(r, "pass", where);
    if (pass != "forward" && pass != "backward") fail("{}: pass must be forward or backward, got '{}'", where, pass);
    a.sample.shape = {field<int64_t>(r, "batch", where) * field<int64_t>(r, "heads", where),
                      field<int64_t>(r, "seq", where), field<int64_t>(r, "head_dim", where), pass == "backward"};
    a.sample.flops = field<double>(r, "flops", where);
    a.sample.seconds = field<double>(r, "seconds", where);
    m.attention.push_back(a);
  }
  const nlohmann::json& ops = list(file, "memory_ops", source);
  for (size_t i = 0; i < ops.size(); ++i) {
    const std::string where = fmt::format("{}: memory_ops[{}]", source, i);
    const nlohmann::json& r = ops[i];
    m.memory_ops.push_back({field<std::string>(r, "op", where), dtype_of(field<std::string>(r, "dtype", where), where),
                            field<double>(r, "elements", where), field<double>(r, "bytes", where),
                            field<double>(r, "seconds", where)});
  }
  return m;
}

SustainedMeasurement load_sustained_measurement(const std::filesystem::path& path) {
  const std::string source = path.string();
  const nlohmann::json file = read_measurements(path, "strata-gpu-sustained-1",
                                                "a sustained-rate file of bench/planner/gpu/measure_sustained.py");
  SustainedMeasurement m;
  m.source = source;
  m.device = field<std::string>(file, "device", source);
  m.dtype = dtype_of(field<std::string>(file, "dtype", source), source);
  m.seconds = field<double>(file, "seconds", source);
  m.shapes = list(file, "shapes", source).size();
  const double tflops = field<double>(file, "sustained_tflops", source);
  if (!(tflops > 0) || !std::isfinite(tflops)) {
    fail("{}: 'sustained_tflops' must be a positive rate, got {}", source, tflops);
  }
  m.sustained_flops = tflops * 1e12;
  return m;
}

}  // namespace strata
