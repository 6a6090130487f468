#!/usr/bin/env bash
# The main job on the built-in default data: set up, prepare the King James
# Bible corpus, train the default GPT-2-style model, and sample from it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh strata  # the tests are built by scripts/test.sh
strata=build/bin/strata

if [[ ! -s data/kjv.txt ]]; then
  bash scripts/default_corpus.sh data/kjv.txt
fi
if [[ ! -f data/kjv/meta.json ]]; then
  "$strata" data prepare data/kjv.txt --out data/kjv --vocab-size 4096
fi
"$strata" train configs/default.toml "$@"
"$strata" sample runs/default --prompt "And it came to pass" --tokens 120 --seed 7
