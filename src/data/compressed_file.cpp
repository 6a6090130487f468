#include "data/compressed_file.h"

#include <zlib.h>
#include <zstd.h>

#include <memory>

#include "core/error.h"

namespace strata {

namespace {

constexpr size_t kOutputStep = 1 << 20;

}  // namespace

bool is_gzip(std::string_view bytes) { return bytes.size() >= 2 && bytes.substr(0, 2) == "\x1f\x8b"; }

bool is_zstd(std::string_view bytes) { return bytes.size() >= 4 && bytes.substr(0, 4) == "\x28\xb5\x2f\xfd"; }

std::string gunzip(std::string_view bytes, std::string_view where) {
  z_stream stream{};
  // 15 + 16: a gzip wrapper, the largest window.
  if (inflateInit2(&stream, 15 + 16) != Z_OK) fail("cannot start decompressing {}: zlib is out of memory", where);
  std::unique_ptr<z_stream, int (*)(z_stream*)> owner(&stream, inflateEnd);
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  stream.avail_in = static_cast<uInt>(bytes.size());
  std::string out;
  int status = Z_OK;
  while (true) {
    const size_t done = out.size();
    out.resize(done + kOutputStep);
    stream.next_out = reinterpret_cast<Bytef*>(out.data() + done);
    stream.avail_out = static_cast<uInt>(kOutputStep);
    status = inflate(&stream, Z_NO_FLUSH);
    out.resize(out.size() - stream.avail_out);
    if (status == Z_STREAM_END) {
      if (stream.avail_in == 0) return out;
      inflateReset(&stream);  // another gzip member follows, as `cat a.gz b.gz` makes
      continue;
    }
    if (status == Z_BUF_ERROR && stream.avail_in == 0) fail("{} ends in the middle of its gzip data", where);
    if (status != Z_OK) fail("{} is not valid gzip data: {}", where, stream.msg != nullptr ? stream.msg : "error");
  }
}

std::string unzstd(std::string_view bytes, std::string_view where) {
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> context(ZSTD_createDCtx(), ZSTD_freeDCtx);
  if (!context) fail("cannot start decompressing {}: libzstd is out of memory", where);
  ZSTD_inBuffer input{bytes.data(), bytes.size(), 0};
  std::string out;
  size_t pending = 0;  // 0 once a frame is complete
  while (input.pos < input.size || pending != 0) {
    const size_t done = out.size();
    out.resize(done + kOutputStep);
    ZSTD_outBuffer output{out.data() + done, kOutputStep, 0};
    const size_t before = input.pos;
    pending = ZSTD_decompressStream(context.get(), &output, &input);
    out.resize(done + output.pos);
    if (ZSTD_isError(pending)) fail("{} is not valid zstd data: {}", where, ZSTD_getErrorName(pending));
    if (pending != 0 && input.pos == input.size && input.pos == before && output.pos == 0) {
      fail("{} ends in the middle of its zstd data", where);
    }
  }
  return out;
}

}  // namespace strata
