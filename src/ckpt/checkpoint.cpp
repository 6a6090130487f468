#include "ckpt/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <system_error>

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json_file.h"

namespace strata {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr std::string_view kStepPrefix = "step_";
constexpr std::string_view kManifestFormat = "strata-checkpoint";
// Version 2 adds "tensors", the index of every global tensor's pieces (stored_tensors.h);
// version 1 (one process, each tensor whole in its file) is still read.
constexpr int kManifestVersion = 2;

// A name that stays inside its directory and cannot collide with the
// manifest or with the hidden temporary files of atomic writes.
bool is_plain_file_name(std::string_view name) {
  return !name.empty() && name.front() != '.' && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

bool parse_step_dir_name(std::string_view name, int64_t* step) {
  if (!name.starts_with(kStepPrefix)) return false;
  std::string_view digits = name.substr(kStepPrefix.size());
  if (digits.size() < 8 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), *step);
  return error == std::errc() && end == digits.data() + digits.size();
}

// Deletes older checkpoints so that `keep_last` remain, counting `written`.
void prune_checkpoints(const fs::path& run_dir, const fs::path& written, int keep_last) {
  std::vector<std::pair<int64_t, fs::path>> others;
  std::error_code error;
  for (const auto& item : fs::directory_iterator(run_dir, error)) {
    int64_t step = 0;
    if (item.path() != written && item.is_directory() &&
        parse_step_dir_name(item.path().filename().string(), &step)) {
      others.emplace_back(step, item.path());
    }
  }
  if (error) {
    spdlog::warn("checkpoint retention skipped: cannot list '{}': {}", run_dir.string(), error.message());
    return;
  }
  std::sort(others.begin(), others.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = static_cast<size_t>(keep_last - 1); i < others.size(); ++i) {
    fs::remove_all(others[i].second, error);
    // The new checkpoint is already complete; a leftover old one only costs space.
    if (error) spdlog::warn("cannot delete old checkpoint '{}': {}", others[i].second.string(), error.message());
  }
}

json read_manifest(const fs::path& dir) {
  fs::path manifest_path = dir / kCheckpointManifest;
  json manifest = read_json_file(manifest_path);
  auto bad = [&](std::string_view what) { fail("'{}': {}", manifest_path.string(), what); };
  if (!manifest.is_object()) bad("not a JSON object");
  // Compared as JSON: a "format" of another type is a mismatch, not a type error.
  if (!manifest.contains("format") || manifest["format"] != kManifestFormat) {
    bad(fmt::format("\"format\" is not \"{}\"", kManifestFormat));
  }
  if (!manifest.contains("version") || (manifest["version"] != 1 && manifest["version"] != kManifestVersion)) {
    bad(fmt::format("unsupported \"version\" (this build reads versions 1 and {})", kManifestVersion));
  }
  if (manifest["version"] == kManifestVersion && !manifest.contains("tensors")) bad("missing \"tensors\"");
  if (!manifest.contains("step") || !manifest["step"].is_number_integer() || manifest["step"].get<int64_t>() < 0) {
    bad("\"step\" is not a non-negative integer");
  }
  if (!manifest.contains("files") || !manifest["files"].is_array()) bad("\"files\" is not an array");
  for (const json& file : manifest["files"]) {
    if (!file.is_string() || !is_plain_file_name(file.get<std::string>())) {
      bad(fmt::format("\"files\" entry {} is not a plain file name", json_excerpt(file)));
    }
  }
  if (!manifest.contains("metadata")) bad("missing \"metadata\"");
  return manifest;
}

}  // namespace

std::string checkpoint_dir_name(int64_t step) { return fmt::format("{}{:08d}", kStepPrefix, step); }

fs::path checkpoint_temp_dir(const fs::path& run_dir, int64_t step) {
  return run_dir / fmt::format(".{}.tmp", checkpoint_dir_name(step));
}

fs::path begin_checkpoint(const fs::path& run_dir, int64_t step) {
  if (step < 0) fail("cannot save a checkpoint in '{}': step {} is negative", run_dir.string(), step);
  std::error_code error;
  fs::create_directories(run_dir, error);
  if (error) fail("cannot create run directory '{}': {}", run_dir.string(), error.message());
  const fs::path temp_dir = checkpoint_temp_dir(run_dir, step);
  fs::remove_all(temp_dir, error);  // a dead save's, which no live writer uses: the owner holds the run directory
  if (!fs::create_directory(temp_dir, error) || error) {
    fail("cannot create '{}': {}", temp_dir.string(), error ? error.message() : "it exists");
  }
  return temp_dir;
}

void abandon_checkpoint(const fs::path& run_dir, int64_t step) {
  std::error_code error;
  fs::remove_all(checkpoint_temp_dir(run_dir, step), error);
}

fs::path commit_checkpoint(const fs::path& run_dir, int64_t step, const std::vector<std::string>& files,
                           const TensorIndex& index, const json& metadata, int keep_last) {
  if (keep_last < 0) fail("cannot save a checkpoint in '{}': keep_last {} is negative", run_dir.string(), keep_last);
  const std::string name = checkpoint_dir_name(step);
  const fs::path final_dir = run_dir / name, temp_dir = checkpoint_temp_dir(run_dir, step);
  std::error_code error;
  try {
    json manifest = {{"format", std::string(kManifestFormat)}, {"version", kManifestVersion}, {"step", step},
                     {"files", files}, {"file_bytes", json::object()}, {"tensors", index_to_json(index)},
                     {"metadata", metadata}};
    for (const std::string& file : files) {
      if (!is_plain_file_name(file) || file == kCheckpointManifest) {
        fail("cannot save a checkpoint in '{}': '{}' is not allowed as a file name", run_dir.string(), file);
      }
      if (!fs::exists(temp_dir / file)) fail("checkpoint file '{}' was not written", (temp_dir / file).string());
      manifest["file_bytes"][file] = fs::file_size(temp_dir / file);
    }
    // The manifest goes last: a directory without it is never a checkpoint.
    write_file_atomic(temp_dir / kCheckpointManifest, manifest.dump(1) + "\n");
    fsync_directory(temp_dir);
    // A run resumed from an earlier checkpoint saves this step again (the same bits, training being
    // deterministic): the two directories swap atomically, so a complete step_N exists at every moment.
    const bool replacing = fs::exists(final_dir);
    const int renamed = replacing ? ::renameat2(AT_FDCWD, temp_dir.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE)
                                  : ::rename(temp_dir.c_str(), final_dir.c_str());
    if (renamed != 0) {
      fail("cannot rename '{}' to '{}': {}", temp_dir.string(), final_dir.string(), errno_text(errno));
    }
    if (replacing) fs::remove_all(temp_dir, error);  // now the replaced checkpoint
  } catch (...) {
    fs::remove_all(temp_dir, error);
    throw;
  }
  fsync_directory(run_dir);
  write_file_atomic(run_dir / kLatestPointer, name + "\n");
  if (keep_last > 0) prune_checkpoints(run_dir, final_dir, keep_last);
  return final_dir;
}

fs::path save_checkpoint(const fs::path& run_dir, int64_t step, const CheckpointFiles& files, const json& metadata,
                         int keep_last) {
  if (keep_last < 0) fail("cannot save a checkpoint in '{}': keep_last {} is negative", run_dir.string(), keep_last);
  for (const auto& item : files) {
    if (!is_plain_file_name(item.first) || item.first == kCheckpointManifest) {
      fail("cannot save a checkpoint in '{}': '{}' is not allowed as a file name", run_dir.string(), item.first);
    }
  }
  const fs::path temp_dir = begin_checkpoint(run_dir, step);
  std::vector<std::string> names;
  TensorIndex index;
  try {
    for (const auto& [file, tensors] : files) {
      write_safetensors(temp_dir / file, tensors);
      names.push_back(file);
      for (const auto& [key, tensor] : tensors) {
        if (index.count(key)) fail("cannot save a checkpoint in '{}': tensor '{}' is in two files", run_dir.string(), key);
        index[key] = {tensor.shape(), tensor.dtype(), {{file, key, whole_box(tensor.shape())}}};
      }
    }
  } catch (...) {
    abandon_checkpoint(run_dir, step);
    throw;
  }
  return commit_checkpoint(run_dir, step, names, index, metadata, keep_last);
}

namespace {

// Why `dir` is not a complete checkpoint (its manifest valid, every file it
// lists present, with the size it recorded), or "" when it is.
std::string incompleteness(const fs::path& dir) {
  if (!fs::exists(dir / kCheckpointManifest)) return fmt::format("no {}", kCheckpointManifest);
  try {
    json manifest = read_manifest(dir);
    for (const json& file : manifest["files"]) {
      fs::path path = dir / file.get<std::string>();
      if (!fs::exists(path)) return fmt::format("'{}' is missing", path.string());
      const json* recorded = manifest.contains("file_bytes") && manifest["file_bytes"].is_object() &&
                                     manifest["file_bytes"].contains(file.get<std::string>())
                                 ? &manifest["file_bytes"][file.get<std::string>()]
                                 : nullptr;
      if (recorded && (!recorded->is_number_unsigned() || recorded->get<uintmax_t>() != fs::file_size(path))) {
        return fmt::format("'{}' has {} bytes, the manifest says {}", path.string(), fs::file_size(path),
                           json_excerpt(*recorded));
      }
    }
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

// The step directories of a run directory, newest first.
std::vector<std::pair<int64_t, fs::path>> step_directories(const fs::path& run_dir) {
  std::vector<std::pair<int64_t, fs::path>> steps;
  std::error_code error;
  for (const auto& item : fs::directory_iterator(run_dir, error)) {
    int64_t step = 0;
    if (item.is_directory() && parse_step_dir_name(item.path().filename().string(), &step)) {
      steps.emplace_back(step, item.path());
    }
  }
  std::sort(steps.begin(), steps.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return steps;
}

}  // namespace

void remove_stale_temporaries(const fs::path& run_dir) {
  std::error_code error;
  for (const auto& item : fs::directory_iterator(run_dir, error)) {
    const std::string name = item.path().filename().string();
    if (name.starts_with(fmt::format(".{}", kStepPrefix)) && name.find(".tmp") != std::string::npos) {
      fs::remove_all(item.path(), error);
      if (error) spdlog::warn("cannot remove the dead save '{}': {}", item.path().string(), error.message());
    }
  }
}

bool has_checkpoints(const fs::path& run_dir) { return !step_directories(run_dir).empty(); }

fs::path resolve_checkpoint(const fs::path& path) {
  if (!fs::exists(path)) fail("checkpoint path '{}' does not exist", path.string());
  if (fs::exists(path / kCheckpointManifest)) return path;
  const fs::path pointer = path / kLatestPointer;
  std::vector<std::pair<int64_t, fs::path>> steps = step_directories(path);
  if (steps.empty() && !fs::exists(pointer)) {
    fail("'{}' is neither a checkpoint directory (no {}) nor a run directory (no {} file, no step_* directories)",
         path.string(), kCheckpointManifest, kLatestPointer);
  }
  // `latest` is replaced after the rename of a new checkpoint: a crash in between leaves it one
  // behind, and damage can leave it naming nothing. The newest complete checkpoint is the truth.
  std::vector<std::string> skipped;
  for (const auto& [step, dir] : steps) {
    std::string why = incompleteness(dir);
    if (why.empty()) {
      std::string named = fs::exists(pointer) ? read_text_file(pointer) : "";
      while (!named.empty() && (named.back() == '\n' || named.back() == ' ')) named.pop_back();
      if (named != dir.filename().string()) {
        spdlog::warn("'{}' names '{}', but '{}' is the newest complete checkpoint{}; using it", pointer.string(),
                     named, dir.string(), skipped.empty() ? "" : fmt::format(" ({})", fmt::join(skipped, "; ")));
      }
      return dir;
    }
    skipped.push_back(fmt::format("'{}' is incomplete: {}", dir.string(), why));
  }
  fail("run directory '{}' holds no complete checkpoint{}", path.string(),
       skipped.empty() ? "" : fmt::format(" ({})", fmt::join(skipped, "; ")));
}

Checkpoint::Checkpoint(const fs::path& path) : dir_(resolve_checkpoint(path)) {
  json manifest = read_manifest(dir_);
  step_ = manifest["step"].get<int64_t>();
  metadata_ = manifest["metadata"];
  files_ = manifest["files"].get<std::vector<std::string>>();
  for (const std::string& file : files_) {
    const fs::path file_path = dir_ / file;
    if (!fs::exists(file_path)) fail("checkpoint file '{}' is missing", file_path.string());
    readers_[file] = std::make_shared<SafetensorsReader>(file_path);
  }
  if (manifest["version"] == 1) {  // every tensor whole, under its own name
    for (const auto& [file, reader] : readers_) {
      for (const auto& [key, entry] : reader->entries()) {
        index_[key] = {entry.shape, entry.dtype, {{file, key, whole_box(entry.shape)}}};
      }
    }
    return;
  }
  index_ = index_from_json(manifest["tensors"], files_, (dir_ / kCheckpointManifest).string());
  for (const auto& [name, tensor] : index_) {
    for (const StoredPiece& piece : tensor.pieces) {
      const SafetensorsReader& reader = *readers_.at(piece.file);
      if (!reader.contains(piece.key)) {
        fail("'{}': tensor '{}' has a piece '{}' that the file does not hold", reader.path().string(), name, piece.key);
      }
      const SafetensorsEntry& entry = reader.entry(piece.key);
      if (entry.dtype != tensor.dtype || entry.shape != piece.box.lengths) {
        fail("'{}': piece '{}' of tensor '{}' is {} {}, but the manifest says {} {} (box {})", reader.path().string(),
             piece.key, name, safetensors_dtype_name(entry.dtype), shape_str(entry.shape),
             safetensors_dtype_name(tensor.dtype), shape_str(piece.box.lengths), box_str(piece.box));
      }
    }
  }
}

namespace {

// Asks the kernel to read ahead the span of a mapped piece that a box of it lies in (from its
// first element to its last), so a cold read streams instead of faulting page by page.
void prefetch(const std::byte* piece, const Shape& shape, const std::vector<int64_t>& offsets,
              const std::vector<int64_t>& lengths, size_t element_bytes) {
  if (shape_numel(lengths) == 0) return;
  const std::vector<int64_t> strides = contiguous_strides(shape);
  int64_t first = 0, last = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    first += offsets[d] * strides[d];
    last += (offsets[d] + lengths[d] - 1) * strides[d];
  }
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(piece) + static_cast<uintptr_t>(first) * element_bytes;
  const auto end = reinterpret_cast<uintptr_t>(piece) + static_cast<uintptr_t>(last + 1) * element_bytes;
  const uintptr_t aligned = begin / page * page;
  ::madvise(reinterpret_cast<void*>(aligned), end - aligned, MADV_WILLNEED);  // a hint: failure is harmless
}

// `bytes` bytes of `path` from `offset` into `to`.
void read_file_range(const fs::path& path, size_t offset, std::byte* to, size_t bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot read '{}': {}", path.string(), errno_text(errno));
  ::posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(bytes), POSIX_FADV_SEQUENTIAL);  // a hint
  while (bytes > 0) {
    const ssize_t got = ::pread(fd, to, bytes, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      const int error = got < 0 ? errno : EIO;
      ::close(fd);
      fail("cannot read '{}' at byte {}: {}", path.string(), offset, got < 0 ? errno_text(error) : "it ends early");
    }
    to += got;
    offset += static_cast<size_t>(got);
    bytes -= static_cast<size_t>(got);
  }
  ::close(fd);
}

}  // namespace

const StoredTensor& Checkpoint::tensor(const std::string& name) const {
  auto found = index_.find(name);
  if (found == index_.end()) fail("checkpoint '{}' has no tensor '{}'", dir_.string(), name);
  return found->second;
}

void Checkpoint::read(const std::string& name, const TensorBox& box, Tensor& destination,
                      const std::vector<int64_t>& destination_offsets) const {
  const StoredTensor& stored = tensor(name);
  if (destination.dtype() != stored.dtype) {
    fail("checkpoint '{}': tensor '{}' is {}, but it is loaded into {}", dir_.string(), name,
         safetensors_dtype_name(stored.dtype), safetensors_dtype_name(destination.dtype()));
  }
  if (!box_within(box, stored.shape)) {
    fail("checkpoint '{}': tensor '{}' is {}, which does not hold the box {} asked for", dir_.string(), name,
         shape_str(stored.shape), box_str(box));
  }
  STRATA_CHECK(destination.is_contiguous() && box_within({destination_offsets, box.lengths}, destination.shape()),
               "box {} of '{}' read into {} at {}", box_str(box), name, shape_str(destination.shape()),
               shape_str(destination_offsets));
  for (const StoredPiece& piece : stored.pieces) {
    std::optional<TensorBox> common = intersect(box, piece.box);
    if (!common) continue;
    std::vector<int64_t> in_piece(box.offsets.size()), in_destination(box.offsets.size());
    for (size_t d = 0; d < box.offsets.size(); ++d) {
      in_piece[d] = common->offsets[d] - piece.box.offsets[d];
      in_destination[d] = destination_offsets[d] + common->offsets[d] - box.offsets[d];
    }
    const SafetensorsReader& reader = *readers_.at(piece.file);
    const size_t element = dtype_size(stored.dtype);
    const std::optional<int64_t> from = contiguous_start(piece.box.lengths, in_piece, common->lengths);
    const std::optional<int64_t> to = contiguous_start(destination.shape(), in_destination, common->lengths);
    if (from) {  // one run in the file: read it straight (no page faults on a map), into place or staged
      const size_t offset = reader.file_offset(piece.key) + static_cast<size_t>(*from) * element;
      const size_t bytes = static_cast<size_t>(common->numel()) * element;
      if (to) {
        read_file_range(reader.path(), offset, static_cast<std::byte*>(destination.raw()) + static_cast<size_t>(*to) * element, bytes);
      } else {
        Tensor staged = Tensor::empty(common->lengths, stored.dtype);
        read_file_range(reader.path(), offset, static_cast<std::byte*>(staged.raw()), bytes);
        copy_box(staged, std::vector<int64_t>(common->lengths.size(), 0), destination, in_destination, common->lengths);
      }
      continue;
    }
    const std::byte* bytes = reader.bytes(piece.key);
    prefetch(bytes, piece.box.lengths, in_piece, common->lengths, element);
    copy_box(bytes, piece.box.lengths, in_piece, destination.raw(), destination.shape(), in_destination,
             common->lengths, element);
  }
}

void Checkpoint::read(const std::string& name, Tensor& destination) const {
  const StoredTensor& stored = tensor(name);
  if (destination.shape() != stored.shape) {
    fail("checkpoint '{}': tensor '{}' is {}, expected {}", dir_.string(), name, shape_str(stored.shape),
         shape_str(destination.shape()));
  }
  read(name, whole_box(stored.shape), destination, std::vector<int64_t>(stored.shape.size(), 0));
}

const SafetensorsReader& Checkpoint::open(const std::string& file) const {
  auto found = readers_.find(file);
  if (found == readers_.end()) {
    fail("checkpoint '{}' has no file '{}' (it has: {})", dir_.string(), file, fmt::join(files_, ", "));
  }
  return *found->second;
}

TensorMap Checkpoint::load(const std::string& file) const { return open(file).load_all(); }

}  // namespace strata
