#!/usr/bin/env bash
# The GPU check (issue 22, docs/GPU.md): one call on a lent GPU machine, within ~9 minutes,
# writes at most 11 files to OUT:
#   gpu_check.log       everything printed
#   pytest.xml          a. pytest -m cuda: fla kernel vs the PyTorch delta rule, fused recurrence
#                          vs the plain path (fp32, bf16 autocast), a bf16 step of every family
#   bench_fp32.json     b. python -m rlt.bench at the paper size, batch 512: fp32,
#   bench_bf16.json        bf16 autocast,
#   bench_graph.json       bf16 + CUDA graphs (s/step, ratios, peak memory),
#   bench_compile.json     bf16 + torch.compile, RLT-0 and RLT-1 (the compiled chunk step
#                          with inductor's CUDA graphs), with the compile times
#   bench_native.json      bf16, RLT-0 and RLT-1 with the C++ token loops (rlt/models/native.py)
#   bench_stack.json       fp32 at the laptop shape: 5 seeds stacked in one step (issue 53) against
#                          5 single steps and one step at 5x the batch (rlt/bench_stack.py)
#   run_rlt1.json       c. results.json of a 500-step paper-scale parity run, RLT-1 6+2,
#   run_transformer.json   and Transformer 8 (trainer=gpu, scale=paper_gpu: micro-batch 512)
#   summary.json        the numbers above in one place, and sweep=main's wall time on one such GPU
# With --cpu the same steps run on this machine's CPU at tiny sizes (no CUDA tests: the CPU
# half of the same test file; no CUDA graph), so CI keeps the script working.
#   bash scripts/gpu_check.sh [--cpu] OUT
set -uo pipefail
MODE=cuda
if [ "${1:-}" = "--cpu" ]; then MODE=cpu; shift; fi
OUT=${1:?usage: scripts/gpu_check.sh [--cpu] OUT}
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
exec > >(tee -a "$OUT/gpu_check.log") 2>&1
export PYTHONUNBUFFERED=1 WANDB_MODE=disabled
START=$(date +%s)
say() { echo "[gpu_check $(( $(date +%s) - START ))s] $*"; }
# The whole check ends within BUDGET seconds (under the device call's timeout_s, 540), so the
# summary is written even where steps run long: each step's own limit is cut to what is left
# (15 s kept for the summary), and a step with under 10 s left is skipped.
BUDGET=${GPU_CHECK_BUDGET:-500}
step() {  # step LIMIT COMMAND...
  local left=$((BUDGET - 15 - ($(date +%s) - START)))
  local limit=$(($1 < left ? $1 : left))
  shift
  if [ "$limit" -lt 10 ]; then
    say "skipped, the check's ${BUDGET} s are spent: ${*:2:3} ..."
    return 124
  fi
  timeout "$limit" "$@"
}

# Wheels the machine lacks (scripts/gpu_wheels.sh), into a temporary path; its torch stays.
if ls "$REPO"/.wheels/*.whl >/dev/null 2>&1; then
  SITE=$(mktemp -d)
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" \
    "$REPO"/.wheels/*.whl || say "wheel install failed"
  export PYTHONPATH="$SITE:$REPO:${PYTHONPATH:-}"
else
  export PYTHONPATH="$REPO:${PYTHONPATH:-}"
fi
cd "$REPO"
WORK=$(mktemp -d)
say "mode $MODE, python $("$PY" -c 'import sys; print(sys.version.split()[0])'), work dir $WORK"
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'

# the C++ token loop (rlt/models/native.py), built once here so the tests and the bench load it
say "building the C++ token loop"
step 120 "$PY" -c "from rlt.models.native import token_loop; token_loop()" ||
  say "the C++ token loop did not build: its tests skip or fail, bench_native.json is missing"

# a. tests
say "a. tests"
if [ "$MODE" = cuda ]; then
  step 180 "$PY" -m pytest -q -p no:cacheprovider -m cuda --junitxml "$OUT/pytest.xml" tests
else
  step 150 "$PY" -m pytest -q -p no:cacheprovider -k cpu --junitxml "$OUT/pytest.xml" \
    tests/models/test_model_gpu_path.py
fi
say "tests exit $?"

# b. bench
say "b. bench"
if [ "$MODE" = cuda ]; then
  BENCH=(--device cuda --preset paper --batch 512 --threads 4 --repeats 5)
else
  BENCH=(--device cpu --preset small --batch 8 --length 12 --threads 1 --repeats 1 --no-memory)
fi
step 120 "$PY" -m rlt.bench "${BENCH[@]}" --json "$OUT/bench_fp32.json"
step 120 "$PY" -m rlt.bench "${BENCH[@]}" --bf16 --json "$OUT/bench_bf16.json"
if [ "$MODE" = cuda ]; then
  step 120 "$PY" -m rlt.bench "${BENCH[@]}" --bf16 --cuda-graph --json "$OUT/bench_graph.json"
  step 120 "$PY" -m rlt.bench "${BENCH[@]}" --bf16 --compile --variants rlt0,rlt1 \
    --repeats 3 --json "$OUT/bench_compile.json"
  step 90 "$PY" -m rlt.bench "${BENCH[@]}" --bf16 --native --variants rlt0,rlt1 \
    --repeats 2 --json "$OUT/bench_native.json"
  step 90 "$PY" -m rlt.bench --device cuda --preset small --split 1+1 --length 20 --threads 4 \
    --variants transformer,rlt0,rlt1 --repeats 5 --stack 5 --json "$OUT/bench_stack.json"
else
  step 90 "$PY" -m rlt.bench "${BENCH[@]}" --variants transformer,rlt1 --stack 2 \
    --json "$OUT/bench_stack.json"

  echo '{"skipped": "CUDA graphs need a GPU"}' > "$OUT/bench_graph.json"
  # CPU compiled numbers: BENCHMARKS.md (compiling four models would double CI's share here)
  echo '{"skipped": "the compiled bench is measured on the CPU in BENCHMARKS.md"}' > "$OUT/bench_compile.json"
  echo '{"skipped": "the C++ token loop is measured on the CPU in BENCHMARKS.md"}' > "$OUT/bench_native.json"
fi
say "bench done"

# c. paper-scale parity runs (500 steps; tiny sizes with --cpu)
say "c. runs"
if [ "$MODE" = cuda ]; then
  RUN=(task=parity scale=paper_gpu scale.max_steps=500 scale.test_lengths_limit=1 trainer=gpu)
else
  RUN=(task=parity experiment=tiny scale.max_steps=4 scale.val_every=2 trainer=cpu)
fi
for cell in "rlt1 model=rlt1 split=6+2" "transformer model=transformer split=6+2"; do
  set -- $cell
  name=$1
  shift
  step 210 "$PY" train.py "${RUN[@]}" "$@" root="$WORK/runs" logger=csv print_table=false
  found=$(find "$WORK/runs" -path "*/$name/*" -name results.json | head -1)
  [ -n "$found" ] && cp "$found" "$OUT/run_$name.json" || say "run $name wrote no results"
done

say "summary"
"$PY" scripts/gpu_summary.py "$OUT" --mode "$MODE" --elapsed "$(( $(date +%s) - START ))"
say "done"
