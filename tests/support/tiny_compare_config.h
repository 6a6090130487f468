#pragma once
// A tiny GPT-2 job for `strata compare` tests: token shards (no tokenizer) and
// a config file naming them, written into a directory; `extra` is appended to
// the file (a [compare] table).
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/token_shard.h"

namespace strata::testing {

inline std::filesystem::path write_tiny_compare_job(const std::filesystem::path& dir, const std::string& extra = "") {
  std::filesystem::create_directories(dir);
  std::vector<int32_t> tokens(4000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7919 + i / 13) % 320);
  write_token_shard(dir / "train.bin", tokens, 320);
  write_token_shard(dir / "val.bin", tokens, 320);
  const std::filesystem::path config = dir / "tiny.toml";
  std::ofstream(config) << "[model]\nn_layer = 2\nn_head = 2\nn_embd = 32\nvocab_size = 320\nblock_size = 16\n"
                        << "[data]\ntrain = \"" << (dir / "train.bin").string() << "\"\nval = \""
                        << (dir / "val.bin").string() << "\"\n"
                        << "[ops]\nthreads = 2\nfallback = \"allow\"\n"
                        << "[train]\nbatch_size = 2\nglobal_batch = 4\nsteps = 10\nwarmup_steps = 2\nlr = 3e-3\n"
                        << "lr_min = 3e-4\nval_every = 0\n"
                        << "[checkpoint]\ndir = \"" << (dir / "run").string() << "\"\nresume = false\n"
                        << extra;
  return config;
}

}  // namespace strata::testing
