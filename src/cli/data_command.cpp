#include <charconv>
#include <iostream>
#include <iterator>
#include <sstream>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "core/error.h"
#include "data/corpus.h"
#include "data/tokenizer.h"

namespace strata::cli {

namespace {

struct PrepareArgs {
  std::vector<std::string> inputs;
  std::string out_dir;
  std::string tokenizer;  // empty: train one
  int vocab_size = 4096;
  double val_fraction = 0.05;
  std::string field = "text";
  bool skip_bad_lines = false;
};

void prepare(const PrepareArgs& args) {
  std::vector<std::filesystem::path> inputs(args.inputs.begin(), args.inputs.end());
  CorpusOptions options;
  options.val_fraction = args.val_fraction;
  options.input = CorpusInputOptions{args.field, args.skip_bad_lines};
  CorpusMeta meta = args.tokenizer.empty()
                        ? prepare_corpus(inputs, args.out_dir, args.vocab_size, options)
                        : prepare_corpus(inputs, args.out_dir, std::filesystem::path(args.tokenizer), options);
  fmt::print("corpus {}: tokenizer {}, vocab {}, {} train tokens in {} shard(s), {} val tokens\n", meta.dir.string(),
             meta.tokenizer.filename().string(), meta.vocab_size, meta.train_tokens, meta.train_shards.size(),
             meta.val_tokens);
  fmt::print("{} document(s), each followed by {}{}\n", meta.documents,
             meta.document_end_id >= 0 ? fmt::format("end-of-text token {}", meta.document_end_id)
                                       : std::string("nothing (the tokenizer has no eos token)"),
             meta.skipped_lines > 0 ? fmt::format("; {} bad JSON Lines record(s) skipped", meta.skipped_lines) : "");
  fmt::print("unigram entropy of train tokens: {:.4f} nats/token; val cross-entropy under it: {:.4f}\n",
             meta.train_unigram_entropy, meta.val_unigram_cross_entropy);
}

struct TokenizeArgs {
  std::string tokenizer;
  bool decode = false;
};

// Standard input's text as ids on one line, or with --decode its whitespace-separated ids as text:
// a tokenizer checked against another from the shell.
void tokenize(const TokenizeArgs& args) {
  const Tokenizer tokenizer = load_tokenizer(args.tokenizer);
  const std::string input{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
  if (!args.decode) {
    fmt::print("{}\n", fmt::join(tokenizer.encode(input), " "));
    return;
  }
  std::istringstream words(input);
  std::vector<int32_t> ids;
  for (std::string word; words >> word;) {
    int32_t id = 0;
    const auto [end, error] = std::from_chars(word.data(), word.data() + word.size(), id);
    if (error != std::errc() || end != word.data() + word.size()) {
      fail("strata data tokenize --decode: item {} of standard input is \"{}\", not a token id", ids.size() + 1, word);
    }
    ids.push_back(id);
  }
  fmt::print("{}", tokenizer.decode(ids));
}

}  // namespace

void add_data_command(CLI::App& app) {
  auto* data = app.add_subcommand("data", "Prepare training data");
  data->require_subcommand(1);
  auto* command = data->add_subcommand(
      "prepare", "Tokenize raw text (with a SentencePiece tokenizer trained on it, or --tokenizer) into token shards");
  auto args = std::make_shared<PrepareArgs>();
  command->add_option("inputs", args->inputs,
                      "UTF-8 text files (each one document), or JSON Lines files (.jsonl, .ndjson, .json: one document "
                      "per line); any of them may be gzip- or zstd-compressed")
      ->required();
  command->add_option("--out", args->out_dir, "Output directory")->required();
  auto* tokenizer = command->add_option(
      "--tokenizer", args->tokenizer,
      "Encode with this tokenizer instead of training one: a model directory (tokenizer.json or tokenizer.model), "
      "a tokenizer.json or a SentencePiece .model; it is copied into --out");
  command->add_option("--vocab-size", args->vocab_size, "Vocabulary size of the tokenizer trained here")
      ->check(CLI::PositiveNumber)
      ->excludes(tokenizer);
  command->add_option("--val-fraction", args->val_fraction, "Share of the text held out for validation")
      ->check(CLI::Range(0.0, 0.5));
  command->add_option("--field", args->field, "The field of a JSON Lines record that holds its text");
  command->add_flag("--skip-bad-lines", args->skip_bad_lines,
                    "Skip and count JSON Lines records that are not JSON objects with a string --field (default: an "
                    "error naming the file and line)");
  command->callback([args] { prepare(*args); });

  auto* tokenize_command = data->add_subcommand(
      "tokenize", "Encode standard input's text and print its ids on one line, or with --decode print the text of "
                  "its ids");
  auto tokenize_args = std::make_shared<TokenizeArgs>();
  tokenize_command
      ->add_option("--tokenizer", tokenize_args->tokenizer,
                   "A model directory (tokenizer.json or tokenizer.model), a tokenizer.json or a SentencePiece .model")
      ->required();
  tokenize_command->add_flag("--decode", tokenize_args->decode, "Read whitespace-separated ids and print their text");
  tokenize_command->callback([tokenize_args] { tokenize(*tokenize_args); });
}

}  // namespace strata::cli
