#!/usr/bin/env bash
# Writes the default corpus, the King James Bible from Debian's bible-kjv-text,
# as plain text: one verse per line, without verse numbers or chapter headings.
set -euo pipefail
out=${1:?usage: default_corpus.sh OUTPUT.txt}
mkdir -p "$(dirname "$out")"
bible -l100000 "gen1:1-rev22:21" \
  | sed -E -e '/^$/d' -e '/^[1-3]? ?[A-Z][A-Za-z ]+ [0-9]+$/d' -e 's/^ *[0-9]+ //' > "$out.tmp"
[[ -s "$out.tmp" ]] || { echo "default_corpus.sh: bible printed nothing" >&2; exit 1; }
mv "$out.tmp" "$out"
