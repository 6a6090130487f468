#pragma once
// The small bf16 matrix products inside the attention kernels on AMX tiles
// (tdpbf16ps: a 16 x 16 f32 tile += a 16-row tile of 16 bf16 pairs times a
// tile of 16 rows of 16 pairs), for CPUs that have them; bf16_dot.h's
// DotStrips computes the same products on AVX-512 BF16 elsewhere. Both offer
//   product(blocks, pairs, a, lda, b, ldb, c, ldc, accumulate):
//     c[kRows, 16 * blocks] (+)= a[kRows, 2 * pairs] b[pairs, 16 * blocks]
// a as pairs along its rows (row stride lda pairs), b as rows of pairs
// (stride ldb), c f32 (stride ldc), f32 accumulation; `pairs` a multiple of
// kDepthPairs (callers pad with zeros).
#include <cstdint>

namespace strata::cpu {

// Whether the attention kernels run their products on AMX tiles: the CPU has
// AMX-TILE and AMX-BF16, Linux granted this process the tile state, and no
// test switched them off.
bool runs_on_amx_tiles();

// Tests: false makes the kernels take their AVX-512 BF16 path even on a CPU
// with AMX, so both paths are checked where both exist.
void set_amx_tiles_allowed(bool allowed);

// This thread's tiles, configured while the object lives (one per kernel
// task: tile state is per thread, and oneDNN configures its own between).
class AmxTiles {
 public:
  static constexpr int64_t kRows = 16;
  static constexpr int64_t kDepthPairs = 16;

  AmxTiles();
  ~AmxTiles();
  AmxTiles(const AmxTiles&) = delete;
  AmxTiles& operator=(const AmxTiles&) = delete;

  void product(int64_t blocks, int64_t pairs, const uint32_t* a, int64_t lda, const uint32_t* b, int64_t ldb,
               float* c, int64_t ldc, bool accumulate) const;
};

}  // namespace strata::cpu
