#include "ckpt/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_file.h"

namespace strata {

namespace fs = std::filesystem;
using json = nlohmann::json;

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian and is copied as is");

namespace {

constexpr std::string_view kMetadataKey = "__metadata__";
constexpr size_t kBypassCacheBytes = size_t{16} << 20;
constexpr DType kAllDTypes[] = {DType::F64, DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64};

}  // namespace

bool parse_safetensors_dtype(std::string_view name, DType* dtype) {
  for (DType candidate : kAllDTypes) {
    if (safetensors_dtype_name(candidate) == name) {
      *dtype = candidate;
      return true;
    }
  }
  return false;
}

std::string_view safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F64: return "F64";
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
  }
  fail("unknown dtype code {}", static_cast<int>(dtype));
}

// ---------------------------------------------------------------- writing

void write_safetensors(const fs::path& path, const TensorMap& tensors, const StringMap& metadata) {
  std::vector<const TensorMap::value_type*> order;
  for (const auto& item : tensors) {
    if (item.first == kMetadataKey) {
      fail("cannot write '{}': '{}' is reserved and cannot name a tensor", path.string(), kMetadataKey);
    }
    if (!item.second.defined()) {
      fail("cannot write '{}': tensor '{}' has no data", path.string(), item.first);
    }
    order.push_back(&item);
  }
  std::stable_sort(order.begin(), order.end(), [](const auto* left, const auto* right) {
    return dtype_size(left->second.dtype()) > dtype_size(right->second.dtype());
  });

  json header = json::object();
  size_t offset = 0;
  for (const auto* item : order) {
    const Tensor& tensor = item->second;
    size_t end = offset + tensor.nbytes();
    header[item->first] = {{"dtype", std::string(safetensors_dtype_name(tensor.dtype()))},
                           {"shape", tensor.shape()},
                           {"data_offsets", {offset, end}}};
    offset = end;
  }
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;

  std::string header_text;
  try {
    header_text = header.dump();
  } catch (const json::exception& error) {  // a name or value that is not UTF-8
    fail("cannot write '{}': {}", path.string(), error.what());
  }
  header_text.resize((header_text.size() + 7) / 8 * 8, ' ');
  if (header_text.size() > kSafetensorsMaxHeaderBytes) {
    fail("cannot write '{}': the header of {} tensors takes {} bytes, over the {}-byte limit readers enforce",
         path.string(), tensors.size(), header_text.size(), kSafetensorsMaxHeaderBytes);
  }

  // Large files (checkpoints, exported weights) bypass the page cache: written once, not read soon.
  AtomicFileWriter writer(path, offset >= kBypassCacheBytes ? WriteCache::Bypass : WriteCache::Buffered);
  uint64_t header_length = header_text.size();
  writer.write(&header_length, sizeof(header_length));
  writer.write(header_text);
  for (const auto* item : order) {
    const Tensor& tensor = item->second;
    if (tensor.nbytes() == 0) continue;
    if (tensor.is_contiguous()) {
      writer.write(tensor.raw(), tensor.nbytes());
    } else {
      writer.write(tensor.clone().raw(), tensor.nbytes());
    }
  }
  writer.commit();
}

// ---------------------------------------------------------------- reading

namespace {

// Parses the header, refusing duplicate tensor names (a plain parse would
// silently keep the last one).
json parse_header(std::string_view text, const fs::path& path) {
  std::set<std::string> names;
  auto reject_duplicates = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1) {
      const auto& name = parsed.get_ref<const std::string&>();
      if (!names.insert(name).second) fail("'{}': tensor '{}' appears twice in the header", path.string(), name);
    }
    return true;
  };
  return parse_json(text, path.string(), reject_duplicates);
}

// A JSON value that must be a non-negative integer fitting in int64.
bool read_count(const json& value, int64_t* out) {
  if (value.is_number_unsigned()) {
    uint64_t raw = value.get<uint64_t>();
    if (raw > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(raw);
    return true;
  }
  if (value.is_number_integer()) {
    *out = value.get<int64_t>();
    return *out >= 0;
  }
  return false;
}

SafetensorsEntry parse_entry(const std::string& name, const json& value, const fs::path& path) {
  auto bad = [&](std::string_view what) {
    fail("'{}': tensor '{}': {} (entry: {})", path.string(), name, what, json_excerpt(value));
  };
  if (!value.is_object()) bad("the entry is not a JSON object");
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!value.contains(key)) bad(fmt::format("missing \"{}\"", key));
  }
  SafetensorsEntry entry{};
  const json& dtype = value["dtype"];
  if (!dtype.is_string()) bad("\"dtype\" is not a string");
  if (!parse_safetensors_dtype(dtype.get_ref<const std::string&>(), &entry.dtype)) {
    fail("'{}': unsupported dtype {} for tensor '{}' (supported: F64, F32, BF16, F16, I32, I64)", path.string(),
         json_excerpt(dtype), name);
  }
  const json& shape = value["shape"];
  if (!shape.is_array()) bad("\"shape\" is not an array");
  uint64_t numel = 1;
  for (const json& extent : shape) {
    int64_t dim = 0;
    if (!read_count(extent, &dim)) bad(fmt::format("shape dimension {} is not a non-negative integer", json_excerpt(extent)));
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dim), &numel)) bad("the shape's element count overflows");
    entry.shape.push_back(dim);
  }
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(entry.dtype)), &nbytes)) {
    bad("the shape's byte size overflows");
  }
  const json& offsets = value["data_offsets"];
  int64_t begin = 0;
  int64_t end = 0;
  if (!offsets.is_array() || offsets.size() != 2 || !read_count(offsets[0], &begin) ||
      !read_count(offsets[1], &end)) {
    bad("\"data_offsets\" is not a pair of non-negative integers");
  }
  if (end < begin) bad("\"data_offsets\" end before begin");
  if (static_cast<uint64_t>(end - begin) != nbytes) {
    bad(fmt::format("\"data_offsets\" span {} bytes but {} with shape {} needs {}", end - begin,
                    dtype.get_ref<const std::string&>(), shape_str(entry.shape), nbytes));
  }
  entry.begin = static_cast<size_t>(begin);
  entry.end = static_cast<size_t>(end);
  return entry;
}

StringMap parse_metadata(const json& value, const fs::path& path) {
  if (!value.is_object()) fail("'{}': \"{}\" is not an object of strings", path.string(), kMetadataKey);
  StringMap metadata;
  for (const auto& [key, text] : value.items()) {
    if (!text.is_string()) {
      fail("'{}': \"{}\" value for key '{}' is not a string: {}", path.string(), kMetadataKey, key, json_excerpt(text));
    }
    metadata[key] = text.get<std::string>();
  }
  return metadata;
}

// The tensors must tile the data buffer exactly: no overlap, no hole, nothing
// after the last one.
void check_coverage(const std::map<std::string, SafetensorsEntry>& entries, size_t buffer_bytes,
                    const fs::path& path) {
  std::vector<const std::pair<const std::string, SafetensorsEntry>*> by_offset;
  for (const auto& item : entries) {
    if (item.second.end > buffer_bytes) {
      fail("'{}': tensor '{}' ends at byte {}, past the {}-byte data buffer", path.string(), item.first,
           item.second.end, buffer_bytes);
    }
    by_offset.push_back(&item);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const auto* left, const auto* right) {
    return std::pair(left->second.begin, left->second.end) < std::pair(right->second.begin, right->second.end);
  });
  size_t covered = 0;
  const std::string* previous = nullptr;
  for (const auto* item : by_offset) {
    const SafetensorsEntry& entry = item->second;
    if (entry.begin < covered) {
      fail("'{}': tensor '{}' at bytes [{}, {}) overlaps tensor '{}', which ends at {}", path.string(),
           item->first, entry.begin, entry.end, *previous, covered);
    }
    if (entry.begin > covered) {
      fail("'{}': {} unused bytes at [{}, {}) before tensor '{}'", path.string(), entry.begin - covered, covered,
           entry.begin, item->first);
    }
    covered = entry.end;
    previous = &item->first;
  }
  if (covered != buffer_bytes) {
    fail("'{}': {} trailing bytes after the last tensor (the tensors cover {} of {} data bytes)", path.string(),
         buffer_bytes - covered, covered, buffer_bytes);
  }
}

}  // namespace

SafetensorsReader::SafetensorsReader(const fs::path& path) : file_(path) {
  size_t file_bytes = file_.size();
  if (file_bytes < sizeof(uint64_t)) {
    fail("'{}': {} bytes is too small for a safetensors file (the header length alone takes 8)", path.string(),
         file_bytes);
  }
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, file_.data(), sizeof(header_bytes));
  if (header_bytes > file_bytes - sizeof(uint64_t)) {
    fail("'{}': header length {} runs past the end of the {}-byte file", path.string(), header_bytes, file_bytes);
  }
  if (header_bytes > kSafetensorsMaxHeaderBytes) {
    fail("'{}': header length {} exceeds the {}-byte limit", path.string(), header_bytes,
         kSafetensorsMaxHeaderBytes);
  }
  data_start_ = sizeof(uint64_t) + header_bytes;
  std::string_view header_text(reinterpret_cast<const char*>(file_.data()) + sizeof(uint64_t), header_bytes);
  json header = parse_header(header_text, path);
  if (!header.is_object()) fail("'{}': the safetensors header is not a JSON object", path.string());
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      metadata_ = parse_metadata(value, path);
    } else {
      entries_.emplace(name, parse_entry(name, value, path));
    }
  }
  check_coverage(entries_, file_bytes - data_start_, path);
}

const SafetensorsEntry& SafetensorsReader::entry(const std::string& name) const {
  auto found = entries_.find(name);
  if (found == entries_.end()) fail("'{}': no tensor named '{}'", path().string(), name);
  return found->second;
}

Tensor SafetensorsReader::load(const std::string& name) const {
  const SafetensorsEntry& found = entry(name);
  Tensor tensor = Tensor::empty(found.shape, found.dtype);
  // A copy, because entries need not be aligned for their dtype in the map.
  if (tensor.nbytes() > 0) std::memcpy(tensor.raw(), file_.data() + data_start_ + found.begin, tensor.nbytes());
  return tensor;
}

const std::byte* SafetensorsReader::bytes(const std::string& name) const {
  return file_.data() + data_start_ + entry(name).begin;
}

TensorMap SafetensorsReader::load_all() const {
  TensorMap tensors;
  for (const auto& item : entries_) tensors.emplace(item.first, load(item.first));
  return tensors;
}

TensorMap read_safetensors(const fs::path& path) { return SafetensorsReader(path).load_all(); }

}  // namespace strata
