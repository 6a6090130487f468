// The strict TOML reader: values read as written, and every kind of mistake
// fails in the one wording, naming the source and the full dotted key.
#include "core/toml_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "support/error_text.h"

namespace strata {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;
using testing::error_of;

const char* kText = R"(
name = "box"
count = 3
ratio = 0.5
whole = 2
on = true
tags = ["a", "b"]
[link]
latency_us = 1.5
[link.detail]
curve = [[1, 0.5], [10, 2]]
)";

TomlReader read(const std::string& text) { return TomlReader::parse(text, "f.toml"); }

TEST(TomlReader, ReadsValuesAsWritten) {
  TomlReader root = read(kText);
  EXPECT_EQ(root.string("name"), "box");
  EXPECT_EQ(root.non_empty_string("name"), "box");
  EXPECT_EQ(root.integer("count", 1, 3), 3);
  EXPECT_DOUBLE_EQ(root.number("ratio"), 0.5);
  EXPECT_DOUBLE_EQ(root.number("whole"), 2.0);  // an integer is a number
  EXPECT_DOUBLE_EQ(root.fraction("ratio"), 0.5);
  EXPECT_TRUE(root.boolean("on"));
  EXPECT_THAT(root.strings("tags"), ElementsAre("a", "b"));
  EXPECT_DOUBLE_EQ(root.table("link").positive("latency_us"), 1.5);
  EXPECT_THAT(root.table("link").table("detail").curve("curve", "x", "y"),
              ElementsAre(Pair(1.0, 0.5), Pair(10.0, 2.0)));
  EXPECT_TRUE(root.has("on"));
  EXPECT_FALSE(root.has("off"));
  EXPECT_THAT(root.table("link").keys(), ElementsAre("detail", "latency_us"));
}

TEST(TomlReader, AbsentOptionalTableIsEmpty) {
  TomlReader absent = read(kText).table("extra", false);
  EXPECT_TRUE(absent.keys().empty());
  EXPECT_EQ(absent.path("x"), "extra.x");
  EXPECT_EQ(error_of([&] { absent.number("x"); }), "f.toml: missing key 'extra.x'");
}

TEST(TomlReader, SyntaxErrorNamesFileLineAndColumn) {
  EXPECT_THAT(error_of([] { read("a = 1\nb = = 2\n"); }), ::testing::StartsWith("f.toml:2:5: invalid TOML: "));
}

TEST(TomlReader, UnknownKeyIsNamedWithTheExpectedOnes) {
  TomlReader link = read(kText).table("link");
  EXPECT_EQ(error_of([&] { link.only({"latency_us", "bandwidth_gbps"}); }),
            "f.toml: unknown key 'link.detail' (expected one of: bandwidth_gbps, latency_us)");
  EXPECT_NO_THROW(link.only({"latency_us", "detail"}));
}

TEST(TomlReader, MissingKeyAndTableAreNamed) {
  TomlReader root = read(kText);
  EXPECT_EQ(error_of([&] { root.table("link").number("bandwidth_gbps"); }),
            "f.toml: missing key 'link.bandwidth_gbps'");
  EXPECT_EQ(error_of([&] { root.table("link").table("more"); }), "f.toml: missing table [link.more]");
}

TEST(TomlReader, WrongTypeSaysWhatWasExpectedAndFound) {
  TomlReader root = read(kText);
  EXPECT_EQ(error_of([&] { root.integer("ratio"); }), "f.toml: key 'ratio' must be an integer, got a float");
  EXPECT_EQ(error_of([&] { root.number("name"); }), "f.toml: key 'name' must be a number, got a string");
  EXPECT_EQ(error_of([&] { root.string("count"); }), "f.toml: key 'count' must be a string, got an integer");
  EXPECT_EQ(error_of([&] { root.boolean("tags"); }), "f.toml: key 'tags' must be a boolean, got an array");
  EXPECT_EQ(error_of([&] { root.table("on"); }), "f.toml: key 'on' must be a table, got a boolean");
  EXPECT_EQ(error_of([&] { root.strings("link"); }), "f.toml: key 'link' must be an array of strings, got a table");
  EXPECT_EQ(error_of([&] { read("tags = [\"a\", 1]").strings("tags"); }),
            "f.toml: key 'tags' entry 1 must be a string, got an integer");
}

TEST(TomlReader, IntegerArraysHoldIntegersOnly) {
  EXPECT_THAT(read("dims = [32, 64, 128]").integers("dims"), ElementsAre(32, 64, 128));
  EXPECT_TRUE(read("dims = []").integers("dims").empty());
  EXPECT_EQ(error_of([] { read("dims = [32, 64.5]").integers("dims"); }),
            "f.toml: key 'dims' entry 1 must be an integer, got a float");
  EXPECT_EQ(error_of([] { read("dims = 32").integers("dims"); }),
            "f.toml: key 'dims' must be an array of integers, got an integer");
}

TEST(TomlReader, OutOfRangeSaysTheLimitAndTheValue) {
  TomlReader root = read("n = 0\nx = -2.5\nbig = 1.5\ninf = inf\nempty = \"\"\n");
  EXPECT_EQ(error_of([&] { root.integer("n", 1); }), "f.toml: key 'n' must be at least 1, got 0");
  EXPECT_EQ(error_of([&] { root.integer("n", 1, 8); }), "f.toml: key 'n' must be in [1, 8], got 0");
  EXPECT_EQ(error_of([&] { root.positive("x"); }), "f.toml: key 'x' must be positive, got -2.5");
  EXPECT_EQ(error_of([&] { root.non_negative("x"); }), "f.toml: key 'x' must be at least 0, got -2.5");
  EXPECT_EQ(error_of([&] { root.fraction("big"); }), "f.toml: key 'big' must be in (0, 1], got 1.5");
  EXPECT_EQ(error_of([&] { root.number("inf"); }), "f.toml: key 'inf' must be finite, got inf");
  EXPECT_EQ(error_of([&] { root.non_empty_string("empty"); }), "f.toml: key 'empty' must not be empty");
  EXPECT_EQ(error_of([&] { root.fail_range("n", "odd", 0); }), "f.toml: key 'n' must be odd, got 0");
}

TEST(TomlReader, CurveEntriesArePositiveIncreasingPairs) {
  auto curve_error = [](const std::string& value) {
    return error_of([&] { read("[t]\nc = " + value).table("t").curve("c", "bytes", "factor"); });
  };
  EXPECT_EQ(curve_error("3"), "f.toml: key 't.c' must be an array of [bytes, factor] pairs, got an integer");
  EXPECT_EQ(curve_error("[[1, 2, 3]]"), "f.toml: key 't.c' entry 0 must be a pair [bytes, factor] of finite numbers");
  EXPECT_EQ(curve_error("[[1, \"x\"]]"), "f.toml: key 't.c' entry 0 must be a pair [bytes, factor] of finite numbers");
  EXPECT_EQ(curve_error("[[1, nan]]"), "f.toml: key 't.c' entry 0 must be a pair [bytes, factor] of finite numbers");
  EXPECT_EQ(curve_error("[[1, 1], [0, 1]]"), "f.toml: key 't.c' entry 1: bytes must be positive, got 0");
  EXPECT_EQ(curve_error("[[8, 1], [4, 1]]"),
            "f.toml: key 't.c' entry 1: bytes must increase from entry to entry, got 4 after 8");
  EXPECT_TRUE(read("c = []").curve("c", "bytes", "factor").empty());
}

TEST(TomlReader, BuiltTablesNameTheirSource) {
  toml::table assignments{{"train", toml::table{{"lr", "fast"}}}};
  TomlReader from_set(std::move(assignments), "--set");
  EXPECT_EQ(error_of([&] { from_set.table("train").number("lr"); }),
            "--set: key 'train.lr' must be a number, got a string");
  EXPECT_EQ(error_of([&] { from_set.table("train").fail_key("lr", "is too fast"); }),
            "--set: key 'train.lr' is too fast");
}

}  // namespace
}  // namespace strata
