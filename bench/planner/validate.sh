#!/usr/bin/env bash
# Planner validation against published training runs (bench/planner/published/*.csv):
# predicted vs measured iteration time, MAE and rank correlation. See validate.py --help.
# Usage: bench/planner/validate.sh [--rows ID,...] [--max-mae PCT | --max-mae-file FILE] [--json OUT] ...
# STRATA overrides the binary (default build/bin/strata).
set -euo pipefail
cd "$(dirname "$0")/../.."
export STRATA=${STRATA:-build/bin/strata}
exec /usr/bin/python3 bench/planner/validate.py "$@"
