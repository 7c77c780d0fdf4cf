#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite, as CI does.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
# One thread per process: the suite runs many processes on 2 cores, and
# oversubscribed BLAS makes timings swing 10x.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
exec .venv/bin/python -m pytest -q -rs --durations=25 "$@"
