#!/usr/bin/env bash
# What portable arithmetic costs on this host (BENCHMARKS.md, "Portable mode on an Intel Xeon"):
# the laptop shape twice and the paper shape once, each in torch's own arithmetic
# (RLT_PORTABLE=0), the portable arithmetic before 2026-12-05 (MKL_CBWR=AVX2) and today's
# (AVX2,STRICT), alternating; 1 thread, the C++ token loop.
#   bash scripts/bench_portable.sh [OUT_DIR]    (default docs/results/bench/<today>)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/results/bench/$(date +%F)}
mkdir -p "$out"
setting() { case $1 in native) echo RLT_PORTABLE=0 ;; avx2) echo MKL_CBWR=AVX2 ;; strict) echo RLT_PORTABLE=1 ;; esac; }
for round in 1 2; do
  for m in native avx2 strict; do
    env "$(setting $m)" python -m rlt.bench --preset small --split 1+1 --length 20 --threads 1 \
      --variants rlt0,rlt1,transformer --repeats 9 --native --no-memory --mode train \
      --json "$out/portable_${m}_laptop_r$round.json" >"$out/portable_${m}_laptop_r$round.txt" 2>&1
  done
done
for m in native avx2 strict; do
  env "$(setting $m)" python -m rlt.bench --preset paper --variants transformer,rlt1 --threads 1 \
    --repeats 3 --warmup 1 --native --no-memory --mode train \
    --json "$out/portable_${m}_paper.json" >"$out/portable_${m}_paper.txt" 2>&1
done
