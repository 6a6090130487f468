#include "parallel/job_world.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace strata {

namespace {

// FNV-1a over the running executable: ranks must run the same build.
uint64_t executable_hash() {
  std::ifstream in("/proc/self/exe", std::ios::binary);
  uint64_t hash = 14695981039346656037ull;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
    for (std::streamsize i = 0; i < in.gcount(); ++i) {
      hash = (hash ^ static_cast<unsigned char>(buffer[i])) * 1099511628211ull;
    }
  }
  return hash;
}

// The dotted key of the first line where two TOML texts written by to_toml
// differ ("[section]" headers, then "key = value" lines), or "" if none.
std::string first_differing_key(const std::string& mine, const std::string& reference) {
  std::istringstream a(mine), b(reference);
  std::string line_a, line_b, section;
  while (true) {
    bool more_a = static_cast<bool>(std::getline(a, line_a));
    bool more_b = static_cast<bool>(std::getline(b, line_b));
    if (!more_a && !more_b) return "";
    if (!more_a) line_a.clear();
    if (!more_b) line_b.clear();
    const std::string& line = line_a.empty() ? line_b : line_a;
    if (!line.empty() && line.front() == '[') section = line.substr(1, line.find(']') - 1);
    if (line_a != line_b) {
      std::string key = line.substr(0, line.find(" ="));
      return line.front() == '[' ? section : section + "." + key;
    }
  }
}

// The root's text on every rank.
std::string broadcast_text(comm::Communicator& group, const std::string& text, int root) {
  int64_t length = static_cast<int64_t>(text.size());
  group.broadcast(&length, 1, DType::I64, root);
  std::vector<int32_t> packed(static_cast<size_t>((length + 3) / 4), 0);
  if (group.rank() == root) std::memcpy(packed.data(), text.data(), text.size());
  group.broadcast(packed.data(), packed.size(), DType::I32, root);
  return std::string(reinterpret_cast<const char*>(packed.data()), static_cast<size_t>(length));
}

}  // namespace

JobWorld::JobWorld(comm::Communicator world) : world_(std::move(world)) {}

JobWorld JobWorld::of(DeviceMesh* mesh) { return mesh ? JobWorld(mesh->world()) : JobWorld(); }

int JobWorld::ranks_on_this_host() const {
  if (!world_) return 1;
  int here = world_->node_of(world_->rank());
  int count = 0;
  for (int rank = 0; rank < world_->size(); ++rank) count += world_->node_of(rank) == here ? 1 : 0;
  return count;
}

int JobWorld::agree_on_stop(int signal) { return static_cast<int>(over_world(signal, comm::ReduceOp::Max)); }

bool JobWorld::all_succeeded(bool mine) { return over_world(mine ? 0.0 : 1.0, comm::ReduceOp::Max) == 0; }

double JobWorld::over_world(double mine, comm::ReduceOp op) {
  if (!world_) return mine;
  float value = static_cast<float>(mine), combined = 0;
  world_->all_reduce(&value, &combined, 1, DType::F32, op);
  return combined;
}

std::vector<double> JobWorld::gather(double mine) {
  std::vector<double> all(static_cast<size_t>(size()), mine);
  if (world_) world_->all_gather(&mine, all.data(), 1, DType::F64);
  return all;
}

ExactSquareSum JobWorld::sum(const ExactSquareSum& mine) {
  if (!world_) return mine;
  std::array<int64_t, ExactSquareSum::kWords> words = mine.words();
  std::vector<int64_t> all(words.size() * static_cast<size_t>(world_->size()));
  world_->all_gather(words.data(), all.data(), words.size(), DType::I64);
  ExactSquareSum total;
  for (int r = 0; r < world_->size(); ++r) total.merge(ExactSquareSum::from_words(all.data() + r * words.size()));
  return total;
}

void JobWorld::check_ranks_agree(const std::string& resolved_config) {
  if (!world_) return;
  comm::Communicator& group = *world_;
  std::string differing_key = first_differing_key(resolved_config, broadcast_text(group, resolved_config, 0));
  uint64_t binary = executable_hash();
  uint64_t reference_binary = binary;
  group.broadcast(&reference_binary, 1, DType::I64, 0);
  // 0: agrees with rank 0; 1: another config; 2: another binary.
  int32_t verdict = !differing_key.empty() ? 1 : binary != reference_binary ? 2 : 0;
  std::vector<int32_t> verdicts(static_cast<size_t>(group.size()));
  group.all_gather(&verdict, verdicts.data(), 1, DType::I32);
  auto first = std::find_if(verdicts.begin(), verdicts.end(), [](int32_t v) { return v != 0; });
  if (first == verdicts.end()) return;
  // Every rank names the same culprit, whichever rank's message the launcher shows.
  const int culprit = static_cast<int>(first - verdicts.begin());
  if (*first == 2) fail("rank {} runs a different strata binary than rank 0 (every rank must run the same build)", culprit);
  fail("rank {} was started with a config that differs from rank 0's, first at key '{}' (every rank must run the "
       "same resolved config)",
       culprit, broadcast_text(group, differing_key, culprit));
}

}  // namespace strata
