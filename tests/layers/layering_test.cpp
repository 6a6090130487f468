// The layers are enforced, not only documented: each src/<layer>/README.md
// says on its "Depends on:" line which layers it builds on, and no file of a
// layer may include a header of a layer outside what that line allows (the
// listed layers and, through them, everything they may use in turn). Every
// library exports the same include root, so only this test stops an include
// that runs up a layer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace strata {
namespace {

namespace fs = std::filesystem;

const fs::path kSourceRoot = fs::path(STRATA_SOURCE_DIR) / "src";

std::set<std::string> layer_names() {
  std::set<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(kSourceRoot)) {
    if (entry.is_directory()) names.insert(entry.path().filename().string());
  }
  return names;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The first sentence of the paragraph starting "Depends on:", without its
// parenthetical remarks (they explain, and may mention other layers).
std::string depends_on_sentence(const std::string& readme) {
  size_t start = readme.find("Depends on:");
  if (start == std::string::npos) return {};
  size_t paragraph_end = readme.find("\n\n", start);
  std::string paragraph = readme.substr(start, paragraph_end == std::string::npos ? std::string::npos
                                                                                   : paragraph_end - start);
  std::string plain;
  int depth = 0;
  for (char c : paragraph) {
    if (c == '(') ++depth;
    if (depth == 0) plain += c;
    if (c == ')' && depth > 0) --depth;
  }
  static const std::regex sentence_end(R"(\.(\s|$))");
  std::smatch end;
  if (std::regex_search(plain, end, sentence_end)) plain = plain.substr(0, static_cast<size_t>(end.position(0)));
  return plain;
}

// Layer -> the layers its README lists.
std::map<std::string, std::set<std::string>> declared_dependencies() {
  std::set<std::string> layers = layer_names();
  std::map<std::string, std::set<std::string>> declared;
  static const std::regex word("[a-z_]+");
  for (const std::string& layer : layers) {
    std::string sentence = depends_on_sentence(read_text(kSourceRoot / layer / "README.md"));
    std::set<std::string>& listed = declared[layer];
    for (std::sregex_iterator it(sentence.begin(), sentence.end(), word), end; it != end; ++it) {
      if (layers.count(it->str()) && it->str() != layer) listed.insert(it->str());
    }
  }
  return declared;
}

// What `layer` may include: itself and everything reachable through its list.
std::set<std::string> allowed_for(const std::string& layer,
                                  const std::map<std::string, std::set<std::string>>& declared) {
  std::set<std::string> allowed{layer};
  std::vector<std::string> pending{layer};
  while (!pending.empty()) {
    std::string next = pending.back();
    pending.pop_back();
    for (const std::string& dependency : declared.at(next)) {
      if (allowed.insert(dependency).second) pending.push_back(dependency);
    }
  }
  return allowed;
}

std::string joined(const std::set<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text;
}

TEST(Layering, EveryLayerHasAReadmeWithADependsOnLine) {
  for (const std::string& layer : layer_names()) {
    fs::path readme = kSourceRoot / layer / "README.md";
    ASSERT_TRUE(fs::exists(readme)) << readme << " is missing";
    EXPECT_FALSE(depends_on_sentence(read_text(readme)).empty()) << readme << " has no 'Depends on:' line";
  }
}

TEST(Layering, LayersFormNoCycle) {
  auto declared = declared_dependencies();
  for (const auto& [layer, listed] : declared) {
    for (const std::string& dependency : listed) {
      EXPECT_FALSE(allowed_for(dependency, declared).count(layer))
          << layer << " depends on " << dependency << ", which depends back on " << layer;
    }
  }
}

TEST(Layering, NoFileIncludesALayerItsReadmeDoesNotAllow) {
  auto declared = declared_dependencies();
  static const std::regex strata_include(R"(^\s*#\s*include\s+"([a-z_]+)/)");
  for (const auto& [layer, listed] : declared) {
    std::set<std::string> allowed = allowed_for(layer, declared);
    for (const fs::directory_entry& entry : fs::recursive_directory_iterator(kSourceRoot / layer)) {
      std::string extension = entry.path().extension().string();
      if (!entry.is_regular_file() || (extension != ".h" && extension != ".cpp")) continue;
      std::ifstream in(entry.path());
      std::string line;
      for (int number = 1; std::getline(in, line); ++number) {
        std::smatch include;
        if (!std::regex_search(line, include, strata_include)) continue;
        EXPECT_TRUE(allowed.count(include[1].str()))
            << fs::relative(entry.path(), STRATA_SOURCE_DIR).string() << ":" << number << " includes "
            << include[1].str() << "/, but src/" << layer << "/README.md's 'Depends on:' allows only "
            << joined(allowed);
      }
    }
  }
}

}  // namespace
}  // namespace strata
