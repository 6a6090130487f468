#pragma once
// A tiny prepared corpus for training tests: `lines` numbered verses written to
// dir/corpus.txt and prepared into dir/data with a 300-token vocabulary.
#include <filesystem>
#include <fstream>
#include <string>

#include "data/corpus.h"

namespace strata::testing {

inline std::filesystem::path prepare_tiny_corpus(const std::filesystem::path& dir, int lines) {
  std::filesystem::create_directories(dir);
  std::ofstream text(dir / "corpus.txt");
  const char* verses[] = {"In the beginning God created the heaven and the earth.",
                          "And the earth was without form, and void.",
                          "And God said, Let there be light: and there was light.",
                          "And God saw the light, that it was good."};
  for (int i = 0; i < lines; ++i) text << verses[i % 4] << " " << i << "\n";
  text.close();
  prepare_corpus({dir / "corpus.txt"}, dir / "data", 300);
  return dir / "data";
}

}  // namespace strata::testing
