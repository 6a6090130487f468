#include "core/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <cerrno>
#include <random>
#include <system_error>

#include "core/error.h"

namespace strata {

namespace fs = std::filesystem;

std::string errno_text(int error_number) {
  return std::error_code(error_number, std::generic_category()).message();
}

namespace {

fs::path directory_of(const fs::path& path) {
  fs::path parent = path.parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

// Unique among threads and processes sharing a directory; O_EXCL (or
// mkdir's EEXIST) settles the rare collision.
std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  uint64_t tag = salt ^ (counter.fetch_add(1) * 0x9e3779b97f4a7c15ull);
  return fmt::format("{}.{:016x}", ::getpid(), tag);
}

fs::path temp_name_for(const fs::path& target) {
  return directory_of(target) / fmt::format(".{}.tmp.{}", target.filename().string(), unique_suffix());
}

}  // namespace

namespace {

// Direct I/O needs buffers, offsets and lengths aligned to the device's logical block (512 or
// 4096 bytes); 4096 suits both.
constexpr size_t kDirectAlignment = 4096;
constexpr size_t kStagingBytes = size_t{8} << 20;

}  // namespace

AtomicFileWriter::AtomicFileWriter(fs::path target, WriteCache cache) : target_(std::move(target)) {
  if (target_.filename().empty()) fail("cannot write '{}': not a file name", target_.string());
  for (int attempt = 0; fd_ < 0; ++attempt) {
    temp_ = temp_name_for(target_);
    // 0666 lets the umask decide the final permissions, as for a plain create.
    const int flags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC;
    if (cache == WriteCache::Bypass) {
      fd_ = ::open(temp_.c_str(), flags | O_DIRECT, 0666);
      if (fd_ >= 0) {
        staging_.reset(static_cast<std::byte*>(std::aligned_alloc(kDirectAlignment, kStagingBytes)));
        STRATA_CHECK(staging_ != nullptr, "no memory for a {}-byte staging buffer", kStagingBytes);
        break;
      }
      if (errno == EINVAL) ::unlink(temp_.c_str());  // no direct I/O on this filesystem: buffered below
    }
    fd_ = ::open(temp_.c_str(), flags, 0666);
    if (fd_ < 0 && (errno != EEXIST || attempt > 100)) {
      int error = errno;
      temp_.clear();
      fail("cannot write '{}': creating a temporary file in '{}' failed: {}", target_.string(),
           directory_of(target_).string(), errno_text(error));
    }
  }
}

AtomicFileWriter::~AtomicFileWriter() { discard(); }

void AtomicFileWriter::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_.empty()) ::unlink(temp_.c_str());
  temp_.clear();
}

void AtomicFileWriter::write_out(const void* data, size_t bytes) {
  STRATA_CHECK(fd_ >= 0, "write to '{}' after commit or failure", target_.string());
  const auto* cursor = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t written = ::write(fd_, cursor, bytes);
    if (written < 0 && errno == EINTR) continue;
    if (written < 0) {
      int error = errno;
      discard();
      fail("cannot write '{}': {}", target_.string(), errno_text(error));
    }
    cursor += written;
    bytes -= static_cast<size_t>(written);
  }
}

void AtomicFileWriter::write_staged(size_t bytes) {
  STRATA_CHECK(bytes % kDirectAlignment == 0, "a direct write of {} bytes", bytes);
  write_out(staging_.get(), bytes);
  staged_ = 0;
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
  written_ += bytes;
  if (!staging_) {
    write_out(data, bytes);
    return;
  }
  const auto* cursor = static_cast<const std::byte*>(data);
  while (bytes > 0) {
    const size_t take = std::min(bytes, kStagingBytes - staged_);
    std::memcpy(staging_.get() + staged_, cursor, take);
    staged_ += take;
    cursor += take;
    bytes -= take;
    if (staged_ == kStagingBytes) write_staged(kStagingBytes);
  }
}

void AtomicFileWriter::commit() {
  STRATA_CHECK(fd_ >= 0, "commit of '{}' twice or after a failure", target_.string());
  if (staging_ && staged_ > 0) {
    // The last block goes out padded to the alignment; the file is then cut to its length.
    const size_t padded = (staged_ + kDirectAlignment - 1) / kDirectAlignment * kDirectAlignment;
    std::memset(staging_.get() + staged_, 0, padded - staged_);
    write_staged(padded);
    if (::ftruncate(fd_, static_cast<off_t>(written_)) != 0) {
      int error = errno;
      discard();
      fail("cannot write '{}': truncating to {} bytes failed: {}", target_.string(), written_, errno_text(error));
    }
  }
  if (::fsync(fd_) != 0) {
    int error = errno;
    discard();
    fail("cannot write '{}': fsync failed: {}", target_.string(), errno_text(error));
  }
  int close_result = ::close(fd_);
  fd_ = -1;
  if (close_result != 0) {
    int error = errno;
    discard();
    fail("cannot write '{}': close failed: {}", target_.string(), errno_text(error));
  }
  if (::rename(temp_.c_str(), target_.c_str()) != 0) {
    int error = errno;
    discard();
    fail("cannot write '{}': rename failed: {}", target_.string(), errno_text(error));
  }
  temp_.clear();
  fsync_directory(directory_of(target_));
}

void write_file_atomic(const fs::path& path, std::span<const std::byte> bytes) {
  AtomicFileWriter writer(path);
  writer.write(bytes.data(), bytes.size());
  writer.commit();
}

void write_file_atomic(const fs::path& path, std::string_view text) {
  write_file_atomic(path, std::as_bytes(std::span(text.data(), text.size())));
}

void fsync_directory(const fs::path& directory) {
  int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("cannot open directory '{}' to fsync it: {}", directory.string(), errno_text(errno));
  int result = ::fsync(fd);
  int error = errno;
  ::close(fd);
  // EINVAL: the file system cannot sync directories; its renames are as durable as they get.
  if (result != 0 && error != EINVAL) {
    fail("cannot fsync directory '{}': {}", directory.string(), errno_text(error));
  }
}

fs::path create_unique_directory(const fs::path& parent, std::string_view prefix) {
  for (int attempt = 0;; ++attempt) {
    fs::path candidate = parent / fmt::format("{}.{}", prefix, unique_suffix());
    if (::mkdir(candidate.c_str(), 0777) == 0) return candidate;
    if (errno != EEXIST || attempt > 100) {
      fail("cannot create a directory in '{}': {}", parent.string(), errno_text(errno));
    }
  }
}

TemporaryDirectory::TemporaryDirectory(std::string_view prefix)
    : path_(create_unique_directory(fs::temp_directory_path(), prefix)) {}

TemporaryDirectory::~TemporaryDirectory() {
  std::error_code ignored;  // a destructor cannot fail: what is left costs only space
  fs::remove_all(path_, ignored);
}

std::string read_text_file(const fs::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot read '{}': {}", path.string(), errno_text(errno));
  std::string text;
  char chunk[1 << 16];
  while (true) {
    ssize_t got = ::read(fd, chunk, sizeof(chunk));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      int error = errno;
      ::close(fd);
      fail("cannot read '{}': {}", path.string(), errno_text(error));
    }
    if (got == 0) break;
    text.append(chunk, static_cast<size_t>(got));
  }
  ::close(fd);
  return text;
}

MappedFile::MappedFile(const fs::path& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open '{}': {}", path.string(), errno_text(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    int error = errno;
    ::close(fd);
    fail("cannot stat '{}': {}", path.string(), errno_text(error));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    fail("cannot map '{}': not a regular file", path.string());
  }
  size_ = static_cast<size_t>(info.st_size);
  if (size_ > 0) {  // mmap rejects a length of 0
    void* address = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (address == MAP_FAILED) {
      int error = errno;
      ::close(fd);
      fail("cannot map '{}': {}", path.string(), errno_text(error));
    }
    data_ = static_cast<const std::byte*>(address);
  }
  ::close(fd);  // the mapping keeps the file open
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

void MappedFile::release() noexcept {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace strata
