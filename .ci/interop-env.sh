#!/usr/bin/env bash
# Builds the separate virtual environment the interop tests use to run a real third-party
# OpenAI-compatible server (`transformers serve`) on CPU, plus the tiny random-weight model it serves.
# Idempotent: a venv whose stamp matches these pins is kept; the model is rebuilt only when missing.
# Kept apart from the project venv so that rigctl itself never depends on torch.
#   usage: bash .ci/interop-env.sh            (prints how long each step took)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${RIGCTL_INTEROP_VENV:-$PWD/.cache/interop-venv}
MODEL=${RIGCTL_INTEROP_MODEL:-$PWD/.cache/interop-model}
# The Python that torch's CPU wheel on the CI machine's disk is for (3.11) where there is one, else the
# machine's own python3 (Debian 13: 3.13; torch then comes from PyPI). Debian's python3 has venv only
# with python3-venv.
PY=${PYTHON:-$(command -v python3.11 || command -v python3)}
if ! "$PY" -c "import ensurepip, venv" 2>/dev/null && command -v apt-get >/dev/null; then
  echo "interop-env: apt-get install python3-venv (for $PY)"
  DEBIAN_FRONTEND=noninteractive apt-get -qq update
  DEBIAN_FRONTEND=noninteractive apt-get -qq install -y --no-install-recommends python3-venv >/dev/null
fi
# torch 2.13.0's CPU wheel lies on the CI machine's disk; transformers 5.x has `serve`.
PINS=(torch==2.13.0 'transformers[serving]>=5,<6' 'tokenizers>=0.21')
STAMP="$VENV/.rigctl-stamp"
WANT="${PINS[*]}"
start=$(date +%s)
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  echo "interop-env: venv $VENV up to date"
else
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  # pip warns about every extra-index folder that lacks a package; those lines are noise here.
  "$VENV/bin/pip" install --quiet "${PINS[@]}" 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
  "$VENV/bin/python" -c "import torch, transformers, fastapi, uvicorn" # fail here, not in the tests
  echo "$WANT" >"$STAMP"
  echo "interop-env: venv built in $(( $(date +%s) - start ))s"
fi
t1=$(date +%s)
BUILT_BY=$(sha256sum tests/interop/build_tiny_model.py | cut -d' ' -f1)
if [[ ! -f "$MODEL/config.json" || "$(cat "$MODEL/.rigctl-stamp" 2>/dev/null)" != "$BUILT_BY" ]]; then
  rm -rf "$MODEL"
  HF_HUB_OFFLINE=1 "$VENV/bin/python" tests/interop/build_tiny_model.py "$MODEL"
  echo "$BUILT_BY" >"$MODEL/.rigctl-stamp"
  echo "interop-env: tiny model built in $(( $(date +%s) - t1 ))s"
else
  echo "interop-env: model $MODEL present"
fi
echo "interop-env: total $(( $(date +%s) - start ))s"
