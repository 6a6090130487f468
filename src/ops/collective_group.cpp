#include "ops/collective_group.h"

#include <cstring>
#include <map>
#include <mutex>

#include "core/error.h"

namespace strata {

namespace {

class SingleRank final : public CollectiveGroup {
 public:
  int size() const override { return 1; }
  void all_reduce_sum(void*, size_t, DType) override {}
};

std::mutex registry_mutex;
std::map<std::string, std::shared_ptr<CollectiveGroup>>& registry() {
  static std::map<std::string, std::shared_ptr<CollectiveGroup>> groups;
  return groups;
}

// The group an op's attrs name; its size must be the `ranks` the graph was built for.
CollectiveGroup& group_of(const std::string& op, const Attrs& attrs) {
  const std::string& name = attrs.get_string("group");
  CollectiveGroup& group = collective_group(name);
  if (group.size() != attrs.get_int("ranks")) {
    fail("op '{}': the graph was built for {} ranks in group '{}', but that group has {}", op, attrs.get_int("ranks"),
         name, group.size());
  }
  return group;
}

void copy_input(const Tensors& inputs, const Tensors& outputs) {
  if (outputs[0].raw() != inputs[0].raw()) {
    std::memcpy(outputs[0].raw(), inputs[0].raw(), inputs[0].nbytes());
  }
}

}  // namespace

void register_collective_group(const std::string& name, std::shared_ptr<CollectiveGroup> group) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  if (group) {
    registry()[name] = std::move(group);
  } else {
    registry().erase(name);
  }
}

CollectiveGroup& collective_group(const std::string& name) {
  static SingleRank single_rank;
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto found = registry().find(name);
  return found == registry().end() ? single_rank : *found->second;
}

void all_reduce_kernel(const Tensors& inputs, const Tensors& outputs, const Attrs& attrs) {
  CollectiveGroup& group = group_of("all_reduce", attrs);
  copy_input(inputs, outputs);
  group.all_reduce_sum(outputs[0].raw(), static_cast<size_t>(outputs[0].numel()), outputs[0].dtype());
}

void copy_to_group_kernel(const Tensors& inputs, const Tensors& outputs, const Attrs& attrs) {
  group_of("copy_to_group", attrs);
  copy_input(inputs, outputs);
}

}  // namespace strata
