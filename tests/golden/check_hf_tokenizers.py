"""`strata data tokenize` against HuggingFace's `tokenizers` library itself, byte for byte.

Builds real tokenizer configurations with `tokenizers` (BPE and Unigram models trained here, on KJV text,
this repository's source code and the stress corpus below): GPT-2's byte-level BPE, LLaMA 3's (its Split
regex, ignore_merges, special tokens), SmolLM's (Digits, then ByteLevel), LLaMA 2's (Prepend and Replace
normalizers, BPE with byte fallback, its decoder chain), Metaspace BPE with byte fallback, and Metaspace
Unigram with and without byte fallback. For each, every stress text (whitespace runs of every shape,
CRLF, tabs, long digit runs, emoji and ZWJ sequences, combining marks, CJK, RTL, invalid UTF-8, special
tokens) and a ~1 MB sample must encode to the ids `tokenizers` gives (add_special_tokens=False) and those
ids decode to the text it decodes them to (special tokens kept). Invalid UTF-8 is compared as both read
it: each maximal invalid subsequence as U+FFFD (Python's errors="replace", Rust's from_utf8_lossy).

Encoding speed of the sample is printed for both (Strata: the command's time less that of an empty
input, i.e. without loading the tokenizer; `tokenizers`: one encode call, one thread), not asserted.

Runs in a venv with PyPI's `tokenizers` (hf_venv.py makes it once); exits 77 (skipped) when it cannot.

Usage: check_hf_tokenizers.py --strata PATH --repo DIR --work-dir DIR [--venv DIR]
"""

import argparse
import functools
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_venv  # noqa: E402

SAMPLE_BYTES = 1 << 20
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>"]
SENTENCEPIECE_SPECIALS = ["<unk>", "<s>", "</s>"]
BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]

STRESS = [
    # whitespace runs: a newline followed by spaces or tabs is where GPT-2's \s+(?!\S) matters
    "tied\n  head", "x\n\n   y", "\n\t\tTabs", "a\n \n  \n   b", "   leading", "trailing   ", " ", "\n", "  \n",
    "\t \t\n\t", " " * 40, "\n" * 12, "a  b   c    d", "end\n\n\n", "\n \n \n",
    "def f(x):\n    if x:\n        return [x,\n                x]\n\treturn None\n",
    "int main() {\n  for (int i = 0; i < 10; ++i) {\n    printf(\"%d\\n\", i);\n  }\n}\n",
    # CRLF and tabs
    "line one\r\nline two\r\n\r\n  indented\r\n", "\r\n\r\n\t\r\n", "col1\tcol2\t\tcol3\t", "\r \r\n \n\r",
    # digits in long runs
    "12345678901234567890123456789", "3.14159265358979 1,000,000 0x1F2E 1e-10", "9" * 100, "٣٤٥٦ ١٢ ۱۲۳ ४५६",
    # emoji and ZWJ sequences, variation selectors, flags
    "👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 ❤️ 🇫🇷🇯🇵", "🙂🙂🙂 tokens 🤖", "a👩🏾‍💻b",
    # combining marks and normalisation-sensitive text
    "e\u0301 n\u0303 a\u0308\u0301 \u01fa Å Å", "Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇", "ﬁ ﬃ ① ⅷ ²",
    # CJK and RTL
    "日本語のテキスト、中文文本。한국어 텍스트", "漢字かなカナ１２３ＡＢＣ", "שלום עולם مرحبا بالعالم", "abc שלום 123 مرحبا!",
    # punctuation, quotes, contractions, Unicode spaces
    "He said ‘hello’ — “quoted” … ½ ℃", "I'm, you're, it's, we'll, they'd, I've, DON'T, O'Neil's",
    "a\u00a0b\u2003c\u3000d\u200be\u2028f\u0085g", "▁already▁metaspace ▁", "<0x41> <unk> and <s> text </s>",
    # special tokens (added tokens of the configurations that have them)
    "<|begin_of_text|>Hello<|end_of_text|>\n<|begin_of_text|> spaced <|end_of_text|>",
    "In the beginning God created the heaven and the earth.",
]
# Invalid UTF-8: stray continuation bytes, truncated sequences, overlong forms, a surrogate, bytes never valid.
STRESS_BYTES = [b"abc\xff\xfe def \xe2\x82 end", b"\xc0\x80 \xed\xa0\x80 ok\x80", b"\xf0\x9f\x98 half emoji \xe6\x97"]


def stress_cases():
    cases = [text.encode() for text in STRESS] + STRESS_BYTES
    return cases + [b"\n".join(cases)]


@functools.lru_cache(maxsize=None)
def kjv_text(repo):
    """The corpus the default job trains on: data/kjv.txt where the quick start wrote it, else written
    afresh from Debian's bible-kjv-text by the script the quick start uses (a clean clone has no data/)."""
    path = os.path.join(repo, "data", "kjv.txt")
    if os.path.exists(path):
        with open(path, "rb") as f:
            return f.read()
    with tempfile.TemporaryDirectory() as scratch:
        written = os.path.join(scratch, "kjv.txt")
        subprocess.run(["bash", os.path.join(repo, "scripts", "default_corpus.sh"), written], check=True)
        with open(written, "rb") as f:
            return f.read()


def text_sample(repo):
    """About 1 MB: KJV text and this repository's own code, which is full of indented lines."""
    kjv = kjv_text(repo)
    code = b""
    for path in sorted(glob.glob(os.path.join(repo, "src", "**", "*.*"), recursive=True)):
        if len(code) >= SAMPLE_BYTES // 2:
            break
        with open(path, "rb") as f:
            code += f.read()
    return kjv[len(kjv) // 2:len(kjv) // 2 + SAMPLE_BYTES // 2] + code[:SAMPLE_BYTES // 2]


def training_text(repo, with_stress):
    """KJV text and Python code, and the stress texts when `with_stress` (else their rare characters
    take the unknown-token and byte-fallback paths)."""
    kjv = kjv_text(repo)[:400_000]
    code = b"".join(open(p, "rb").read() for p in sorted(glob.glob(os.path.join(repo, "tests", "**", "*.py"),
                                                                         recursive=True)))[:200_000]
    text = kjv + code + (b"\n".join(stress_cases()) if with_stress else b"")
    return text.decode("utf-8", "replace").splitlines(keepends=True)


def with_model(tokenizer, edit):
    """`tokenizer` rebuilt from its JSON after `edit(document)`: options the trainers do not set."""
    from tokenizers import Tokenizer
    document = json.loads(tokenizer.to_str())
    edit(document)
    return Tokenizer.from_str(json.dumps(document))


def prepend_tokens(document, tokens):
    """The BPE or Unigram vocabulary with `tokens` first (SentencePiece's layout: <unk>, <s>, </s>, bytes)."""
    model = document["model"]
    if model["type"] == "Unigram":
        kept = [entry for entry in model["vocab"] if entry[0] not in tokens]
        model["vocab"] = [[token, 0.0] for token in tokens] + kept
        model["unk_id"] = 0
    else:
        kept = sorted((i, t) for t, i in model["vocab"].items() if t not in tokens)
        model["vocab"] = {t: i for i, t in enumerate(tokens + [t for _, t in kept])}
    document["added_tokens"] = []


def byte_level_bpe(lines, pre_tokenizer, specials_after=(), ignore_merges=False):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(lines, trainers.BpeTrainer(
        vocab_size=3000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    if ignore_merges:
        tokenizer = with_model(tokenizer, lambda d: d["model"].update(ignore_merges=True))
    tokenizer.add_special_tokens(list(specials_after))
    return tokenizer


def sentencepiece_bpe(lines, legacy):
    """LLaMA 2's tokenizer.json as transformers converts it (legacy: Prepend + Replace normalizers, no
    pre-tokenizer) or Metaspace with prepend_scheme "first" (transformers' non-legacy form)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=3000, limit_alphabet=150, show_progress=False))
    tokenizer = with_model(tokenizer, lambda d: prepend_tokens(d, SENTENCEPIECE_SPECIALS + BYTE_TOKENS))
    if legacy:
        tokenizer.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tokenizer.pre_tokenizer = None
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first", split=False)
    tokenizer.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                           decoders.Strip(" ", 1, 0)])
    tokenizer.add_special_tokens(SENTENCEPIECE_SPECIALS)
    return tokenizer


def unigram(lines, byte_fallback):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.train_from_iterator(lines, trainers.UnigramTrainer(
        vocab_size=2000, special_tokens=["<unk>"], unk_token="<unk>", max_piece_length=12, show_progress=False))
    tokens = ["<unk>"] + (BYTE_TOKENS if byte_fallback else [])
    tokenizer = with_model(tokenizer, lambda d: (prepend_tokens(d, tokens), d["model"].update(byte_fallback=byte_fallback)))
    tokenizer.decoder = (decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace()]) if byte_fallback
                         else decoders.Metaspace())
    tokenizer.add_special_tokens(["<unk>"])
    return tokenizer


def configurations(repo):
    from tokenizers import Regex, pre_tokenizers
    lines, plain_lines = training_text(repo, True), training_text(repo, False)
    return {
        "gpt2": byte_level_bpe(lines, pre_tokenizers.ByteLevel(add_prefix_space=False)),
        "llama3": byte_level_bpe(lines, pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), LLAMA3_SPECIALS, ignore_merges=True),
        "smollm2": byte_level_bpe(lines, pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]),
            ["<|endoftext|>", "<|im_start|>"]),
        "llama2_legacy": sentencepiece_bpe(lines, legacy=True),
        "metaspace_bpe": sentencepiece_bpe(lines, legacy=False),
        "unigram": unigram(plain_lines, byte_fallback=False),
        "unigram_byte_fallback": unigram(plain_lines, byte_fallback=True),
    }


def strata_tokenize(args, tokenizer_json, data, decode=False):
    command = [args.strata, "data", "tokenize", "--tokenizer", tokenizer_json] + (["--decode"] if decode else [])
    started = time.perf_counter()
    done = subprocess.run(command, input=data, capture_output=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.decode(errors='replace')}")
    return done.stdout, seconds


def first_difference(ours, theirs):
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return i
    return min(len(ours), len(theirs))


def check(args, name, tokenizer, path, data, label, failures):
    """Ids and decoded text of `data` (bytes); returns the number of ids compared."""
    text = data.decode("utf-8", "replace")
    theirs = tokenizer.encode(text, add_special_tokens=False).ids
    out, _ = strata_tokenize(args, path, data)
    ours = [int(word) for word in out.split()]
    if ours != theirs:
        i = first_difference(ours, theirs)
        failures.append(f"{name} {label}: ids differ at {i} of {len(theirs)} (text {text[:60]!r}): strata "
                        f"{ours[max(0, i - 2):i + 4]}, tokenizers {theirs[max(0, i - 2):i + 4]}")
        return len(theirs)
    decoded, _ = strata_tokenize(args, path, " ".join(map(str, theirs)).encode(), decode=True)
    expected = tokenizer.decode(theirs, skip_special_tokens=False)
    if decoded.decode("utf-8") != expected:
        ours_text = decoded.decode("utf-8", "replace")
        i = first_difference(ours_text, expected)
        failures.append(f"{name} {label}: decoded text differs at character {i}: strata {ours_text[i:i + 30]!r}, "
                        f"tokenizers {expected[i:i + 30]!r}")
    return len(theirs)


def encode_speed(args, name, tokenizer, path, sample):
    text = sample.decode("utf-8", "replace")
    started = time.perf_counter()
    tokenizer.encode(text, add_special_tokens=False)
    theirs = time.perf_counter() - started
    _, empty = strata_tokenize(args, path, b"")
    _, whole = strata_tokenize(args, path, sample)
    ours = max(whole - empty, 1e-6)
    megabytes = len(sample) / 1e6
    print(f"  {name:<22} encode {megabytes:.2f} MB: strata {megabytes / ours:6.2f} MB/s, "
          f"tokenizers {megabytes / theirs:6.2f} MB/s (strata/tokenizers {theirs / ours:.2f}x)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strata", required=True)
    parser.add_argument("--repo", required=True, help="the repository root (data/kjv.txt and src/ for the sample)")
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--venv", default=hf_venv.DEFAULT_VENV)
    args = parser.parse_args()
    hf_venv.reexec_in_venv(args.venv, ["tokenizers"], "import tokenizers")
    import tokenizers

    shutil.rmtree(args.work_dir, ignore_errors=True)
    os.makedirs(args.work_dir)
    sample = text_sample(args.repo)
    print(f"tokenizers {tokenizers.__version__}; {len(stress_cases())} stress texts, a {len(sample)}-byte sample")
    failures, compared = [], 0
    built = configurations(args.repo)
    for name, tokenizer in built.items():
        path = os.path.join(args.work_dir, name, "tokenizer.json")
        os.makedirs(os.path.dirname(path))
        tokenizer.save(path)
        before = len(failures)
        ids = sum(check(args, name, tokenizer, path, data, f"stress text {i}", failures)
                  for i, data in enumerate(stress_cases()))
        ids += check(args, name, tokenizer, path, sample, "sample", failures)
        compared += ids
        print(f"{name}: {ids} ids compared, {'differences' if len(failures) > before else 'identical'}")
        encode_speed(args, name, tokenizer, path, sample)
    for failure in failures:
        print("FAILED:", failure)
    print(f"{compared} ids compared over {len(built)} configurations: {len(failures)} difference(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
