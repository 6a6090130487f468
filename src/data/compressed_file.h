#pragma once
// gzip (zlib) and zstd (libzstd) data decompressed in memory, every member or
// frame of a concatenation; corrupt or truncated data is an error naming `where`.
#include <string>
#include <string_view>

namespace strata {

bool is_gzip(std::string_view bytes);  // by the magic bytes 1f 8b
bool is_zstd(std::string_view bytes);  // by the magic bytes 28 b5 2f fd

std::string gunzip(std::string_view bytes, std::string_view where);
std::string unzstd(std::string_view bytes, std::string_view where);

}  // namespace strata
