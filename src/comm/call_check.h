#pragma once
// What every rank of a group must agree on for one call (see CallCheck), as
// plain words: the one-host algorithms carry it in the shared segment beside
// their data, the others exchange it on the group's control channel.
#include <cstdint>
#include <span>
#include <string>

namespace strata::comm {

struct Fingerprint {
  uint64_t sequence = 0;
  uint64_t count = 0;
  int32_t op = 0;
  int32_t algorithm = 0;
  int32_t dtype = 0;
  int32_t reduce = 0;
  int32_t root = 0;
  int32_t barrier = 0;

  bool operator==(const Fingerprint&) const = default;
};
static_assert(sizeof(Fingerprint) == 40, "a fingerprint fits a call header's cache line with three more words");

// "rank 0 made call #5 all_reduce(count 10, f32, sum, ring); ranks 1,2 made call #5 ..."
// for prints indexed by group rank.
std::string describe_disagreement(std::span<const Fingerprint> prints);

}  // namespace strata::comm
