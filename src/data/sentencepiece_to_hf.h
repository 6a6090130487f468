#pragma once
// A SentencePiece BPE model (tokenizer.model: the ones `strata data prepare`
// trains, LLaMA 2's) as the HuggingFace tokenizer.json that encodes and
// decodes alike, so that transformers loads it as a fast tokenizer without
// sentencepiece or protobuf. The mapping, by the semantics of both:
//   - vocab: every piece at its id; merges: every split of a normal piece into
//     two pieces, ranked by the merged piece's score (SentencePiece merges the
//     best-scoring adjacent pair, leftmost on ties: the library's lowest rank);
//   - unknown and control pieces are special added tokens, user-defined ones
//     (Strata's "\n") added tokens matched whole in the raw text, as
//     SentencePiece never merges them;
//   - pre_tokenizer Metaspace: spaces as '▁', a '▁' prepended to the text when
//     the model adds a dummy prefix, no split (SentencePiece's BPE runs over
//     the whole text); byte_fallback as the model's;
//   - decoder: '▁' back to a space, <0xXX> runs to their bytes, the dummy
//     prefix's space stripped.
// What has no equivalent (Unigram, word or char models, a precompiled
// normalisation map such as nmt_nfkc, remove_extra_whitespaces, spaces kept
// unescaped or as a suffix) is an error naming the file and the field.
#include <filesystem>

#include <nlohmann/json.hpp>

namespace strata {

nlohmann::ordered_json sentencepiece_to_hf(const std::filesystem::path& model_file);

}  // namespace strata
