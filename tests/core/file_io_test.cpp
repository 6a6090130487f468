// Atomic writes, memory maps and text reads, including the failure paths:
// a failed write must leave the old file as it was and no temporary behind.
#include "core/file_io.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "support/error_text.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("strata-core-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  fs::path operator/(std::string_view name) const { return path_ / name; }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<std::string> list_names(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& item : fs::directory_iterator(dir)) names.push_back(item.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

using testing::error_of;

TEST(FileIo, AtomicWriteCreatesAndReplaces) {
  TempDir dir;
  write_file_atomic(dir / "a.txt", "first");
  EXPECT_EQ(read_bytes(dir / "a.txt"), "first");
  std::string binary("\x00\x01\xff\n\x00", 5);
  write_file_atomic(dir / "a.txt", std::as_bytes(std::span(binary.data(), binary.size())));
  EXPECT_EQ(read_bytes(dir / "a.txt"), binary);
  write_file_atomic(dir / "empty", "");
  EXPECT_EQ(fs::file_size(dir / "empty"), 0u);
  EXPECT_THAT(list_names(dir.path()), ElementsAre("a.txt", "empty"));  // no temporaries left
}

// Bypassing the page cache (O_DIRECT through an aligned staging buffer, or buffered where the
// filesystem has no direct I/O) gives the same bytes for any length and any split into writes:
// empty, under one block, block-aligned, and past the staging buffer's 8 MiB with odd pieces.
TEST(FileIo, WritesBypassingThePageCacheGiveTheSameBytes) {
  TempDir dir;
  for (size_t length : {size_t{0}, size_t{1}, size_t{4095}, size_t{4096}, size_t{4097}, (size_t{8} << 20) * 2 + 12345}) {
    SCOPED_TRACE(length);
    std::string bytes(length, '\0');
    for (size_t i = 0; i < length; ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 13);
    AtomicFileWriter writer(dir / "direct.bin", WriteCache::Bypass);
    for (size_t at = 0, piece = 1; at < length; at += piece, piece = piece * 3 + 7) {
      writer.write(bytes.data() + at, std::min(piece, length - at));
    }
    writer.commit();
    EXPECT_TRUE(read_bytes(dir / "direct.bin") == bytes);
    EXPECT_THAT(list_names(dir.path()), ElementsAre("direct.bin"));
  }
}

TEST(FileIo, AtomicWriteGivesUmaskPermissions) {
  TempDir dir;
  mode_t mask = ::umask(022);
  write_file_atomic(dir / "p", "x");
  ::umask(mask);
  EXPECT_EQ(fs::status(dir / "p").permissions(), fs::perms(0644));
}

TEST(FileIo, FailedWriteKeepsTheOldFileAndLeavesNoTemporary) {
  TempDir dir;
  write_file_atomic(dir / "keep.bin", "old content");
  std::string big(256 * 1024, 'x');
  std::string message;
  {
    // Writes past 64 KiB fail with EFBIG, as on a full disk, even for root.
    rlimit saved{};
    ::getrlimit(RLIMIT_FSIZE, &saved);
    auto previous = ::signal(SIGXFSZ, SIG_IGN);
    rlimit lowered = saved;
    lowered.rlim_cur = 64 * 1024;
    ::setrlimit(RLIMIT_FSIZE, &lowered);
    message = error_of([&] { write_file_atomic(dir / "keep.bin", big); });
    ::setrlimit(RLIMIT_FSIZE, &saved);
    ::signal(SIGXFSZ, previous);
  }
  EXPECT_THAT(message, HasSubstr((dir / "keep.bin").string()));
  EXPECT_THAT(message, HasSubstr("File too large"));
  EXPECT_EQ(read_bytes(dir / "keep.bin"), "old content");
  EXPECT_THAT(list_names(dir.path()), ElementsAre("keep.bin"));
}

TEST(FileIo, WriteErrorsNameThePath) {
  TempDir dir;
  fs::path nowhere = dir / "missing_dir" / "f.txt";
  std::string message = error_of([&] { write_file_atomic(nowhere, "x"); });
  EXPECT_THAT(message, HasSubstr(nowhere.string()));
  EXPECT_THAT(message, HasSubstr("No such file or directory"));

  fs::create_directory(dir / "occupied");
  fs::path occupied_file = dir / "occupied" / "inner";
  write_file_atomic(occupied_file, "inside");
  message = error_of([&] { write_file_atomic(dir / "occupied", "x"); });  // a non-empty directory
  EXPECT_THAT(message, HasSubstr((dir / "occupied").string()));
  EXPECT_EQ(read_bytes(occupied_file), "inside");
  EXPECT_THAT(list_names(dir.path()), ElementsAre("occupied"));
}

TEST(FileIo, UncommittedWriterLeavesTargetUntouched) {
  TempDir dir;
  write_file_atomic(dir / "t", "before");
  {
    AtomicFileWriter writer(dir / "t");
    writer.write("after");
  }
  EXPECT_EQ(read_bytes(dir / "t"), "before");
  EXPECT_THAT(list_names(dir.path()), ElementsAre("t"));
}

TEST(FileIo, FsyncDirectoryNamesAMissingDirectory) {
  TempDir dir;
  fsync_directory(dir.path());
  std::string missing = (dir / "gone").string();
  EXPECT_THAT(error_of([&] { fsync_directory(missing); }), HasSubstr(missing));
}

TEST(FileIo, CreateUniqueDirectoryMakesFreshDirectories) {
  TempDir dir;
  fs::path first = create_unique_directory(dir.path(), ".stage");
  fs::path second = create_unique_directory(dir.path(), ".stage");
  EXPECT_NE(first, second);
  EXPECT_TRUE(fs::is_directory(first));
  EXPECT_TRUE(fs::is_directory(second));
  EXPECT_EQ(first.parent_path(), dir.path());
  std::string missing = (dir / "no_parent").string();
  EXPECT_THAT(error_of([&] { create_unique_directory(missing, "x"); }), HasSubstr(missing));
}

TEST(FileIo, ReadTextFile) {
  TempDir dir;
  std::string text(200000, 'q');
  text[12345] = '\0';
  write_file_atomic(dir / "t", text);
  EXPECT_EQ(read_text_file(dir / "t"), text);
  std::string missing = (dir / "absent.txt").string();
  std::string message = error_of([&] { read_text_file(missing); });
  EXPECT_THAT(message, HasSubstr(missing));
  EXPECT_THAT(message, HasSubstr("No such file or directory"));
  EXPECT_THAT(error_of([&] { read_text_file(dir.path()); }), HasSubstr(dir.path().string()));
}

TEST(FileIo, MappedFileSeesTheBytes) {
  TempDir dir;
  write_file_atomic(dir / "m", "mapped bytes");
  MappedFile file(dir / "m");
  ASSERT_EQ(file.size(), 12u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(file.data()), file.size()), "mapped bytes");
  EXPECT_EQ(file.path(), dir / "m");

  MappedFile moved(std::move(file));
  EXPECT_EQ(moved.size(), 12u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(moved.data()), 6), "mapped");
  MappedFile assigned(dir / "m");
  assigned = std::move(moved);
  EXPECT_EQ(assigned.size(), 12u);
}

TEST(FileIo, MappedFileOfAnEmptyFile) {
  TempDir dir;
  write_file_atomic(dir / "e", "");
  MappedFile file(dir / "e");
  EXPECT_EQ(file.size(), 0u);
  EXPECT_TRUE(file.bytes().empty());
}

TEST(FileIo, MappedFileErrorsNameTheFile) {
  TempDir dir;
  std::string missing = (dir / "nope.bin").string();
  EXPECT_THAT(error_of([&] { MappedFile file(missing); }), HasSubstr(missing));
  std::string message = error_of([&] { MappedFile file(dir.path()); });
  EXPECT_THAT(message, HasSubstr(dir.path().string()));
  EXPECT_THAT(message, HasSubstr("not a regular file"));
}

}  // namespace
}  // namespace strata
