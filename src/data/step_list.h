#pragma once
// tokenizer.json's normalizer, pre_tokenizer and decoder are each one step or a "Sequence" of
// them (nested sequences too): read into one flat list of steps, in order, by a table of the step
// types this build reads. An unknown type is an error naming the key and the types it reads.
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_fields.h"

namespace strata {

template <typename Step>
using StepList = std::vector<std::unique_ptr<const Step>>;

// Reads one step from its node; `before`: the steps read ahead of it.
template <typename Step>
using StepReader =
    std::function<std::unique_ptr<const Step>(const nlohmann::json& node, const std::string& where, const StepList<Step>& before)>;

template <typename Step>
struct StepTypes {
  std::string_view sequence_key;  // a Sequence's list: "normalizers", "pretokenizers", "decoders"
  std::string_view plural;        // in errors: "normalizers", "pre-tokenizers", "decoders"
  std::vector<std::pair<std::string_view, StepReader<Step>>> readers;  // in the order errors list them
};

template <typename Step>
void read_steps(const nlohmann::json& node, const std::string& where, const StepTypes<Step>& types,
                StepList<Step>& steps) {
  const std::string type = json_string(node, "type", where);
  if (type == "Sequence") {
    json_for_each_item(node, types.sequence_key, where, [&](const nlohmann::json& item, const std::string& item_where) {
      read_steps(item, item_where, types, steps);
    });
    return;
  }
  std::string known;
  for (const auto& [name, read] : types.readers) {
    if (name == type) {
      steps.push_back(read(node, where, steps));
      return;
    }
    known += std::string(name) + ", ";
  }
  known.replace(known.size() - 2, 2, " and Sequence");
  fail("{} is \"{}\": this build reads the {} {}", json_member(where, "type"), type, types.plural, known);
}

}  // namespace strata
