// The safetensors reader and writer against the format's definition: files
// are built and inspected byte by byte here, independently of the code under
// test.
#include "ckpt/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <initializer_list>

#include <nlohmann/json.hpp>

#include "support/error_text.h"
#include "support/test_files.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;
using testing::TempDir;
using testing::read_bytes;
using testing::write_bytes;

std::string le64(uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((value >> (8 * i)) & 0xffu);
  return bytes;
}

std::string pad8(std::string header) {
  header.resize((header.size() + 7) / 8 * 8, ' ');
  return header;
}

// A complete file: length prefix, header as given, data.
std::string file_bytes(const std::string& header, std::string_view data) {
  return le64(header.size()) + header + std::string(data);
}

template <typename T>
std::string raw(std::initializer_list<T> values) {
  std::string bytes(values.size() * sizeof(T), '\0');
  std::memcpy(bytes.data(), values.begin(), bytes.size());
  return bytes;
}

using testing::error_of;

TEST(Safetensors, ReadsAFileBuiltByHand) {
  TempDir dir;
  std::string header = pad8(
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("n":{"dtype":"I64","shape":[],"data_offsets":[8,16]}})");
  // 1.5f = 0x3fc00000, -2.0f = 0xc0000000, int64 -3 = 0xff..fd, all little-endian.
  std::string data("\x00\x00\xc0\x3f\x00\x00\x00\xc0\xfd\xff\xff\xff\xff\xff\xff\xff", 16);
  write_bytes(dir / "hand.safetensors", file_bytes(header, data));

  SafetensorsReader reader(dir / "hand.safetensors");
  EXPECT_EQ(reader.metadata(), (StringMap{{"format", "pt"}}));
  ASSERT_EQ(reader.entries().size(), 2u);
  Tensor w = reader.load("w");
  EXPECT_EQ(w.dtype(), DType::F32);
  EXPECT_EQ(w.shape(), (Shape{2}));
  EXPECT_EQ(w.data<float>()[0], 1.5f);
  EXPECT_EQ(w.data<float>()[1], -2.0f);
  Tensor n = reader.load("n");
  EXPECT_EQ(n.dtype(), DType::I64);
  EXPECT_EQ(n.shape(), Shape{});
  EXPECT_EQ(n.data<int64_t>()[0], -3);
}

TEST(Safetensors, AcceptsWhitespaceAroundTheHeaderAndAnEmptyFile) {
  TempDir dir;
  std::string header = "  {\"a\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}\t\n ";
  write_bytes(dir / "padded.safetensors", file_bytes(header, raw<int32_t>({42})));
  EXPECT_EQ(SafetensorsReader(dir / "padded.safetensors").load("a").data<int32_t>()[0], 42);

  write_bytes(dir / "empty.safetensors", file_bytes("{}      ", ""));
  EXPECT_TRUE(read_safetensors(dir / "empty.safetensors").empty());
}

TEST(Safetensors, WriterLayoutFollowsTheSpec) {
  TempDir dir;
  TensorMap tensors;
  tensors["b"] = Tensor::empty({3}, DType::F32);
  for (int i = 0; i < 3; ++i) tensors["b"].data<float>()[i] = static_cast<float>(i + 1);
  tensors["a"] = Tensor::empty({2, 1}, DType::BF16);
  tensors["a"].data<bf16>()[0] = bf16{0x3f80};
  tensors["a"].data<bf16>()[1] = bf16{0xc000};
  tensors["c"] = Tensor::empty({1}, DType::I64);
  tensors["c"].data<int64_t>()[0] = 0x0102030405060708;
  tensors["z"] = Tensor::empty({0, 5}, DType::F64);
  tensors["s"] = Tensor::empty({}, DType::F16);
  tensors["s"].data<fp16>()[0] = fp16{0x3c00};
  write_safetensors(dir / "out.safetensors", tensors, {{"step", "7"}});

  std::string bytes = read_bytes(dir / "out.safetensors");
  ASSERT_GE(bytes.size(), 8u);
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(header_length % 8, 0u);
  std::string header = bytes.substr(8, header_length);
  EXPECT_EQ(header.front(), '{');
  size_t close = header.rfind('}');
  EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos) << "padding must be spaces";
  EXPECT_LT(header.size() - close - 1, 8u) << "no more padding than needed";

  // Largest element size first, then by name; contiguous from 0.
  json parsed = json::parse(header);
  EXPECT_EQ(parsed["__metadata__"], (json{{"step", "7"}}));
  auto expect_entry = [&](const char* name, const char* dtype, json shape, size_t begin, size_t end) {
    SCOPED_TRACE(name);
    EXPECT_EQ(parsed[name]["dtype"], dtype);
    EXPECT_EQ(parsed[name]["shape"], shape);
    EXPECT_EQ(parsed[name]["data_offsets"], (json{begin, end}));
  };
  expect_entry("c", "I64", {1}, 0, 8);
  expect_entry("z", "F64", {0, 5}, 8, 8);
  expect_entry("b", "F32", {3}, 8, 20);
  expect_entry("a", "BF16", {2, 1}, 20, 24);
  expect_entry("s", "F16", json::array(), 24, 26);
  EXPECT_EQ(parsed.size(), 6u);

  std::string data = bytes.substr(8 + header_length);
  std::string expected = std::string("\x08\x07\x06\x05\x04\x03\x02\x01", 8) +          // c
                         std::string("\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40", 12) +  // b
                         std::string("\x80\x3f\x00\xc0", 4) +                         // a
                         std::string("\x00\x3c", 2);                                  // s
  EXPECT_EQ(data, expected);
}

TEST(Safetensors, RoundTripsEveryDtypeAndStridedViews) {
  TempDir dir;
  TensorMap tensors;
  for (DType dtype : {DType::F64, DType::F32, DType::BF16, DType::F16, DType::I32, DType::I64}) {
    Tensor tensor = Tensor::empty({2, 3}, dtype);
    auto* bytes = static_cast<unsigned char*>(tensor.raw());
    for (size_t i = 0; i < tensor.nbytes(); ++i) bytes[i] = static_cast<unsigned char>(i * 37 + 11);
    tensors[std::string("t_") + std::string(dtype_name(dtype))] = tensor;
  }
  Tensor wide = Tensor::empty({3, 4}, DType::F32);
  for (int i = 0; i < 12; ++i) wide.data<float>()[i] = static_cast<float>(i);
  tensors["strided"] = wide.narrow(1, 1, 2);  // columns 1..2: not contiguous
  write_safetensors(dir / "all.safetensors", tensors);

  TensorMap loaded = read_safetensors(dir / "all.safetensors");
  ASSERT_EQ(loaded.size(), tensors.size());
  for (const auto& [name, tensor] : tensors) {
    SCOPED_TRACE(name);
    const Tensor& back = loaded.at(name);
    EXPECT_EQ(back.dtype(), tensor.dtype());
    EXPECT_EQ(back.shape(), tensor.shape());
    Tensor contiguous = tensor.clone();
    EXPECT_EQ(std::memcmp(back.raw(), contiguous.raw(), contiguous.nbytes()), 0);
  }
  const float* strided = loaded.at("strided").data<float>();
  EXPECT_EQ(std::vector<float>(strided, strided + 6), (std::vector<float>{1, 2, 5, 6, 9, 10}));
}

struct BadFile {
  const char* what;
  std::string bytes;
  std::vector<std::string> message_parts;
};

std::string entry(const char* name, const char* dtype, const char* shape, const char* offsets) {
  return fmt::format(R"("{}":{{"dtype":"{}","shape":{},"data_offsets":{}}})", name, dtype, shape, offsets);
}

TEST(Safetensors, RejectsMalformedFilesNamingFileAndTensor) {
  const std::string four(4, '\x01');
  const std::string eight(8, '\x01');
  const std::string twelve(12, '\x01');
  const std::vector<BadFile> cases = {
      {"shorter than the length prefix", "abc", {"too small"}},
      {"header length beyond the file", le64(1000) + "{}", {"header length 1000", "runs past the end"}},
      {"header length far beyond the file", le64(~uint64_t{0}) + "{}", {"runs past the end"}},
      {"non-JSON header", file_bytes("{not json}      ", ""), {"not valid JSON"}},
      {"invalid UTF-8 in the header", file_bytes(pad8("{\"\xff\":1}"), ""), {"not valid JSON"}},
      {"non-object header", file_bytes("[1, 2, 3]       ", ""), {"not a JSON object"}},
      {"entry not an object", file_bytes(pad8(R"({"x":[1]})"), ""), {"tensor 'x'", "not a JSON object"}},
      {"unknown dtype", file_bytes(pad8("{" + entry("x", "U8", "[1]", "[0,1]") + "}"), "\x01"),
       {"unsupported dtype \"U8\" for tensor 'x'"}},
      {"made-up dtype", file_bytes(pad8("{" + entry("y", "F31", "[1]", "[0,4]") + "}"), four),
       {"unsupported dtype \"F31\" for tensor 'y'"}},
      {"offsets too short for the shape", file_bytes(pad8("{" + entry("x", "F32", "[3]", "[0,8]") + "}"), eight),
       {"tensor 'x'", "span 8 bytes", "needs 12"}},
      {"negative dimension", file_bytes(pad8("{" + entry("x", "F32", "[-1]", "[0,0]") + "}"), ""),
       {"tensor 'x'", "dimension -1"}},
      {"fractional dimension", file_bytes(pad8("{" + entry("x", "F32", "[1.5]", "[0,4]") + "}"), four),
       {"tensor 'x'", "dimension 1.5"}},
      {"offsets not a pair", file_bytes(pad8("{" + entry("x", "F32", "[1]", "[0]") + "}"), four),
       {"tensor 'x'", "data_offsets"}},
      {"offsets reversed", file_bytes(pad8("{" + entry("x", "F32", "[0]", "[4,0]") + "}"), four),
       {"tensor 'x'", "end before begin"}},
      {"missing data_offsets", file_bytes(pad8(R"({"x":{"dtype":"F32","shape":[1]}})"), four),
       {"tensor 'x'", "missing \"data_offsets\""}},
      {"overlapping tensors",
       file_bytes(pad8("{" + entry("a", "F32", "[2]", "[0,8]") + "," + entry("b", "F32", "[2]", "[4,12]") + "}"),
                  twelve),
       {"tensor 'b'", "overlaps tensor 'a'"}},
      {"a hole between tensors",
       file_bytes(pad8("{" + entry("a", "F32", "[1]", "[0,4]") + "," + entry("b", "F32", "[1]", "[8,12]") + "}"),
                  twelve),
       {"4 unused bytes", "before tensor 'b'"}},
      {"a hole at the start", file_bytes(pad8("{" + entry("a", "F32", "[1]", "[4,8]") + "}"), eight),
       {"unused bytes", "before tensor 'a'"}},
      {"trailing bytes", file_bytes(pad8("{" + entry("a", "F32", "[1]", "[0,4]") + "}"), four + "xy"),
       {"2 trailing bytes"}},
      {"tensor past the buffer", file_bytes(pad8("{" + entry("a", "F32", "[2]", "[0,8]") + "}"), four),
       {"tensor 'a'", "past the 4-byte data buffer"}},
      {"duplicate tensor names",
       file_bytes(pad8("{" + entry("x", "F32", "[1]", "[0,4]") + "," + entry("x", "F32", "[1]", "[4,8]") + "}"),
                  eight),
       {"tensor 'x' appears twice"}},
      {"metadata with a non-string value", file_bytes(pad8(R"({"__metadata__":{"k":1}})"), ""),
       {"__metadata__", "'k'", "not a string"}},
  };
  TempDir dir;
  for (const BadFile& bad : cases) {
    SCOPED_TRACE(bad.what);
    auto path = dir / "bad.safetensors";
    write_bytes(path, bad.bytes);
    std::string message = error_of([&] { SafetensorsReader reader(path); });
    EXPECT_THAT(message, HasSubstr(path.string()));
    for (const std::string& part : bad.message_parts) EXPECT_THAT(message, HasSubstr(part));
  }
}

TEST(Safetensors, MissingFilesAndTensorsAreNamed) {
  TempDir dir;
  std::string missing = (dir / "absent.safetensors").string();
  EXPECT_THAT(error_of([&] { SafetensorsReader reader(missing); }), HasSubstr(missing));

  TensorMap tensors{{"present", Tensor::zeros({1}, DType::F32)}};
  write_safetensors(dir / "one.safetensors", tensors);
  SafetensorsReader reader(dir / "one.safetensors");
  std::string message = error_of([&] { reader.load("absent_tensor"); });
  EXPECT_THAT(message, HasSubstr("absent_tensor"));
  EXPECT_THAT(message, HasSubstr((dir / "one.safetensors").string()));
}

TEST(Safetensors, WriterRejectsBadInputNamingFileAndTensor) {
  TempDir dir;
  auto path = dir / "w.safetensors";
  std::string message = error_of([&] { write_safetensors(path, {{"ghost", Tensor()}}); });
  EXPECT_THAT(message, HasSubstr(path.string()));
  EXPECT_THAT(message, HasSubstr("'ghost'"));

  message = error_of([&] { write_safetensors(path, {{"__metadata__", Tensor::zeros({1}, DType::F32)}}); });
  EXPECT_THAT(message, HasSubstr("reserved"));

  message = error_of([&] { write_safetensors(path, {{"bad\xff", Tensor::zeros({1}, DType::F32)}}); });
  EXPECT_THAT(message, HasSubstr(path.string()));

  auto nowhere = dir / "no_such_dir" / "w.safetensors";
  message = error_of([&] { write_safetensors(nowhere, {{"x", Tensor::zeros({1}, DType::F32)}}); });
  EXPECT_THAT(message, HasSubstr(nowhere.string()));
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace strata
