#pragma once
// Crash-safe file writes and read-only file access. Every error names the file
// and carries the operating system's reason.
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace strata {

// How a writer's bytes reach the disk. Through the page cache, or around it
// (O_DIRECT through an aligned staging buffer) for bulk data such as
// checkpoints: those bytes are not read again soon, and on a machine short of
// page-cache pages ready to use (a VM whose memory the host backs lazily, a
// host whose cache is full) a buffered write of a large file runs at a
// fraction of the disk's speed. Filesystems without O_DIRECT get buffered writes.
enum class WriteCache { Buffered, Bypass };

// Streams bytes into a temporary file next to `target`; commit() makes them
// durable and renames the file over `target`, so readers see either the old
// content or the new one, never a mix. Destroying an uncommitted writer
// removes the temporary file and leaves `target` as it was.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::filesystem::path target, WriteCache cache = WriteCache::Buffered);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  void commit();  // fsync, rename over the target, fsync the directory

  const std::filesystem::path& target() const { return target_; }

 private:
  void discard() noexcept;
  void write_out(const void* data, size_t bytes);  // to the file, as it is opened
  void write_staged(size_t bytes);                 // the staging buffer's first `bytes` (aligned)

  std::filesystem::path target_;
  std::filesystem::path temp_;
  int fd_ = -1;
  // WriteCache::Bypass: bytes gather in an aligned buffer written out in whole blocks.
  std::unique_ptr<std::byte, void (*)(void*)> staging_{nullptr, std::free};
  size_t staged_ = 0;
  size_t written_ = 0;  // bytes of the file so far, staged ones included
};

void write_file_atomic(const std::filesystem::path& path, std::span<const std::byte> bytes);
void write_file_atomic(const std::filesystem::path& path, std::string_view text);

// Makes a rename or file creation inside `directory` durable.
void fsync_directory(const std::filesystem::path& directory);

// Creates a new, empty directory `parent/<prefix>.<unique suffix>` (permissions
// from the umask) and returns its path.
std::filesystem::path create_unique_directory(const std::filesystem::path& parent, std::string_view prefix);

// A new directory under the system's temporary directory (create_unique_directory), removed with
// its contents when this goes out of scope, whatever happened: scratch space of one command.
class TemporaryDirectory {
 public:
  explicit TemporaryDirectory(std::string_view prefix);
  ~TemporaryDirectory();
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

std::string read_text_file(const std::filesystem::path& path);

// A whole file mapped read-only; an empty file maps to an empty span.
class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void release() noexcept;

  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

// The text of errno `error_number`, thread-safe.
std::string errno_text(int error_number);

}  // namespace strata
