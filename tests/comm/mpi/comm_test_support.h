#pragma once
// Shared by the MPI tests: the groups under test and deterministic inputs
// every rank can recompute for every other rank (the serial reference).
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace strata::comm::testing {

// The world with the test links and a tiny pipeline chunk (so moderate counts
// already cut blocks into many chunks).
Communicator& flat_world();
// The world cut into simulated nodes (2 per node; 3 for 6 ranks), or null when
// the rank count gives no two-level layout.
Communicator* two_level_world();
// The flat world without an exchange area: the one-host algorithms read every
// peer's data by cross-memory attach instead of copying it from shared memory.
Communicator& unstaged_world();
// All three, for tests that run on every layout.
std::vector<Communicator*> test_groups();
CommConfig test_config();

enum class Values { SmallIntegers, Uniform };

// The input of `rank` at `index`: small integers (sums exact in any order,
// also in bf16) or uniform floats in [-1, 1); rounded to bf16 for bf16 buffers.
float input_value(Values values, uint32_t seed, int rank, size_t index, DType dtype);

std::vector<std::byte> make_buffer(size_t count, DType dtype);
void store(std::vector<std::byte>& buffer, DType dtype, size_t index, float value);
float load(const std::vector<std::byte>& buffer, DType dtype, size_t index);

// True when every rank of MPI_COMM_WORLD's `group` holds identical bytes
// (checked with raw MPI, independent of the code under test).
bool identical_on_all_ranks(const Communicator& group, const std::vector<std::byte>& bytes);

}  // namespace strata::comm::testing
