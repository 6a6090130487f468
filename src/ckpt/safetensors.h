#pragma once
// The safetensors format: an 8-byte little-endian header length N, N bytes of
// JSON naming each tensor's dtype, shape and [begin, end) byte range in the
// data buffer that follows, then the buffer itself. The reader rejects every
// file the reference implementation rejects, with the file and tensor named.
#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "core/file_io.h"
#include "core/tensor.h"

namespace strata {

using TensorMap = std::map<std::string, Tensor>;
using StringMap = std::map<std::string, std::string>;

// The reference rejects larger headers; so do we, on both sides.
inline constexpr size_t kSafetensorsMaxHeaderBytes = 100'000'000;

std::string_view safetensors_dtype_name(DType dtype);  // "F32", "BF16", ...
bool parse_safetensors_dtype(std::string_view name, DType* dtype);  // false for a name not supported

// Tensors are laid out contiguously, largest element size first and then by
// name, so each one starts at a multiple of its element size (as the
// reference writer does); the header is space-padded to a multiple of 8
// bytes. The file is replaced atomically.
void write_safetensors(const std::filesystem::path& path, const TensorMap& tensors,
                       const StringMap& metadata = {});

struct SafetensorsEntry {
  DType dtype;
  Shape shape;
  size_t begin;  // byte range within the data buffer
  size_t end;
};

// Maps a file and validates its whole header up front.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return file_.path(); }
  const StringMap& metadata() const { return metadata_; }
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  const SafetensorsEntry& entry(const std::string& name) const;  // fails naming name and file

  Tensor load(const std::string& name) const;  // an owned copy
  // The entry's bytes in the map (not necessarily aligned for its dtype), and where they start in the file.
  const std::byte* bytes(const std::string& name) const;
  size_t file_offset(const std::string& name) const { return data_start_ + entry(name).begin; }
  TensorMap load_all() const;

 private:
  MappedFile file_;
  size_t data_start_ = 0;
  StringMap metadata_;
  std::map<std::string, SafetensorsEntry> entries_;
};

TensorMap read_safetensors(const std::filesystem::path& path);

}  // namespace strata
