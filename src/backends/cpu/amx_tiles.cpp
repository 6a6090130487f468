#include "backends/cpu/amx_tiles.h"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#define STRATA_AMX __attribute__((target("amx-tile,amx-bf16")))

namespace strata::cpu {

namespace {

bool cpu_has_amx_bf16() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (edx >> 24 & 1u) != 0 && (edx >> 22 & 1u) != 0;  // CPUID.(7,0):EDX AMX-TILE, AMX-BF16
}

// Linux (5.16 on) lets a process use the tiles' 8 KiB of state only once it
// asked: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA).
bool linux_grants_tile_data() {
  constexpr int kRequestPermission = 0x1023;  // ARCH_REQ_XCOMP_PERM
  constexpr int kTileData = 18;               // XFEATURE_XTILEDATA
  return syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0;
}

std::atomic<bool> tiles_allowed{true};

// Palette 1, every tile 16 rows of 64 bytes (16 f32 or 16 bf16 pairs):
// tiles 0-3 hold c, 4 a step of a, 5-7 steps of b.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

// Constructors take no target attribute in GCC 12, hence these.
STRATA_AMX void load_tile_config() {
  static const TileConfig config;
  _tile_loadconfig(&config);
}

STRATA_AMX void release_tiles() { _tile_release(); }

// c[16, 16 * kBlocks] (+)= a b, 16 pairs of the depth at a time. Tile
// numbers are part of each instruction, hence one branch per block.
template <int kBlocks>
STRATA_AMX void tile_block(int64_t pairs, const uint32_t* a, int64_t lda, const uint32_t* b, int64_t ldb, float* c,
                           int64_t ldc, bool accumulate) {
  const int64_t a_bytes = lda * 4, b_bytes = ldb * 4, c_bytes = ldc * 4;
  if (accumulate) {
    _tile_loadd(0, c, c_bytes);
    if constexpr (kBlocks > 1) _tile_loadd(1, c + 16, c_bytes);
    if constexpr (kBlocks > 2) _tile_loadd(2, c + 32, c_bytes);
    if constexpr (kBlocks > 3) _tile_loadd(3, c + 48, c_bytes);
  } else {
    _tile_zero(0);
    if constexpr (kBlocks > 1) _tile_zero(1);
    if constexpr (kBlocks > 2) _tile_zero(2);
    if constexpr (kBlocks > 3) _tile_zero(3);
  }
  for (int64_t p = 0; p < pairs; p += AmxTiles::kDepthPairs) {
    const uint32_t* b_step = b + p * ldb;
    _tile_loadd(4, a + p, a_bytes);
    _tile_loadd(5, b_step, b_bytes);
    _tile_dpbf16ps(0, 4, 5);
    if constexpr (kBlocks > 1) {
      _tile_loadd(6, b_step + 16, b_bytes);
      _tile_dpbf16ps(1, 4, 6);
    }
    if constexpr (kBlocks > 2) {
      _tile_loadd(7, b_step + 32, b_bytes);
      _tile_dpbf16ps(2, 4, 7);
    }
    if constexpr (kBlocks > 3) {
      _tile_loadd(5, b_step + 48, b_bytes);
      _tile_dpbf16ps(3, 4, 5);
    }
  }
  _tile_stored(0, c, c_bytes);
  if constexpr (kBlocks > 1) _tile_stored(1, c + 16, c_bytes);
  if constexpr (kBlocks > 2) _tile_stored(2, c + 32, c_bytes);
  if constexpr (kBlocks > 3) _tile_stored(3, c + 48, c_bytes);
}

}  // namespace

bool runs_on_amx_tiles() {
  static const bool available = cpu_has_amx_bf16() && linux_grants_tile_data();
  return available && tiles_allowed.load(std::memory_order_relaxed);
}

void set_amx_tiles_allowed(bool allowed) { tiles_allowed.store(allowed, std::memory_order_relaxed); }

AmxTiles::AmxTiles() { load_tile_config(); }

AmxTiles::~AmxTiles() { release_tiles(); }

// GCC's tile intrinsics are asm statements without a memory clobber: the
// barriers keep the caller's stores to a and b before the tile loads, and its
// reads of c after the tile stores, however this gets inlined.
STRATA_AMX void AmxTiles::product(int64_t blocks, int64_t pairs, const uint32_t* a, int64_t lda, const uint32_t* b,
                                  int64_t ldb, float* c, int64_t ldc, bool accumulate) const {
  asm volatile("" ::: "memory");
  for (; blocks >= 4; blocks -= 4, b += 64, c += 64) tile_block<4>(pairs, a, lda, b, ldb, c, ldc, accumulate);
  switch (blocks) {
    case 3: tile_block<3>(pairs, a, lda, b, ldb, c, ldc, accumulate); break;
    case 2: tile_block<2>(pairs, a, lda, b, ldb, c, ldc, accumulate); break;
    case 1: tile_block<1>(pairs, a, lda, b, ldb, c, ldc, accumulate); break;
    default: break;
  }
  asm volatile("" ::: "memory");
}

}  // namespace strata::cpu
