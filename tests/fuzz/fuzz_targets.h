#pragma once
// The parsers of untrusted input, as fuzz targets: each takes arbitrary bytes
// and must either accept them or fail with strata::Error (a message naming the
// file or key), never crash, hang or throw anything else. Shared by the
// libFuzzer executables (scripts/fuzz.sh) and the CTest regression run over
// tests/fuzz/corpus/.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace strata::fuzz {

using Target = void (*)(const uint8_t* data, size_t size);

struct NamedTarget {
  std::string name;  // also the corpus folder's name
  Target run;
};

// safetensors (whole file), token_shard (whole file), meta_json,
// checkpoint_json (a checkpoint's manifest), train_config (TOML text),
// tokenizer_json (a HuggingFace tokenizer.json, then encoding and decoding),
// hf_config (a HuggingFace model directory's config.json).
const std::vector<NamedTarget>& targets();
Target target_named(const std::string& name);

}  // namespace strata::fuzz
