#!/usr/bin/env bash
# The pure-Python wheels the lent GPU machine lacks (docs/GPU.md), for Python 3.12, into the
# ignored folder .wheels/ (about 2 MB): hydra-core, omegaconf, antlr4 (built here: PyPI has only
# its source), flash-linear-attention and fla-core. The machine has torch, lightning, triton,
# pandas, matplotlib, rich, pytest and einops; its torch is used as it is.
#   bash scripts/gpu_wheels.sh          then scripts/gpu_check.sh on the device (docs/GPU.md)
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=.wheels
PY=${PYTHON:-python3}
rm -rf "$DEST"
mkdir -p "$DEST"
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d "$DEST" \
  hydra-core==1.3.2 omegaconf==2.3.0 flash-linear-attention==0.6.0 fla-core==0.6.0
"$PY" -m pip wheel -q --no-deps -w "$DEST" antlr4-python3-runtime==4.9.3
ls -1 "$DEST"
du -sh "$DEST"
