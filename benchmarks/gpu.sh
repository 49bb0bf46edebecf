#!/usr/bin/env bash
# The prepared GPU check, one command for a lent GPU machine (about 8 minutes on one current
# data-centre GPU): doctor, every device code path (bf16 autocast, fused AdamW, SDPA backends,
# NCCL or a clear skip), every notebook in the gpu profile with shortened training, the GPT bar
# (6x6x384, val <= 1.47) and the attention / MHA benchmarks. Writes benchmarks/results/gpu.*.
#   bash benchmarks/gpu.sh --dry-run        # the plan only
#   bash benchmarks/gpu.sh --card t4        # on Colab's / Kaggle's T4 (16 GB, fp16 + GradScaler):
#                                           # the same checks; its ~43 min plan is an ESTIMATE
#   bash benchmarks/gpu.sh --help           # options (profile, stages, step counts, ...)
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [[ -z "${COURSE_DATA_DIR:-}" && -f ../shared/data/tinyshakespeare.txt ]]; then
    COURSE_DATA_DIR="$(cd ../shared/data && pwd)"
    export COURSE_DATA_DIR
fi
exec python -m course_utils.bench.gpu_check "$@"
