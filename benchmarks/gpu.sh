#!/usr/bin/env bash
# The gpu-profile benchmarks in one command, for a lent GPU machine. Output: benchmarks/results/gpu.*
set -euo pipefail
cd "$(dirname "$0")/.."
export COURSE_PROFILE=gpu
data=${COURSE_DATA:-../shared/data/tinyshakespeare.txt}
mkdir -p benchmarks/results
course doctor | tee benchmarks/results/gpu-doctor.txt
course bench attention mha gpt vit --device cuda --data "$data" \
    --json benchmarks/results/gpu.json 2>&1 | tee benchmarks/results/gpu.txt
