#!/usr/bin/env bash
# Re-make every shipped artefact that was measured with a shipped head, after that head changed.
#
#   bash scripts/refresh_heads.sh [--dry-run | --quick] [--remeasure-costs] [--no-bench] [--data DIR] HEAD[,HEAD...]
#                                                        HEAD: eagle1 eagle3 medusa sps
#
#   (no flag)   full size, writes into assets/ (run it on an IDLE machine: the benchmarks time things)
#   --dry-run   print the full-size commands, run nothing
#   --quick     every step at its smallest size, in a temporary copy of the tree (specviz/, scripts/,
#               assets/ with the current heads) and of the user cache's cost files: assets/ and the
#               real cache are never written. Ends with the list of files the refresh touched there.
#   --remeasure-costs  also re-measure this machine's cached forward curve and per-round overhead
#               (fp32 and bf16) before tuning, for every tree method: do it when the cached costs
#               were measured on a busy machine (they choose every device-tuned tree below).
#   --no-bench  skip step 6 (the ~25-minute benchmarks); it lists the result files left stale, whose
#               speeds and taus are then the previous head's until the step is run.
#   --data DIR  the regenerated data whose held-out shards step 4 evaluates on (default: the user
#               cache's train/data/<model>, where `python -m specviz.train data` writes). Checked before
#               anything is changed.
#
# A head folder serves several methods: eagle1 -> EAGLE-1 and EAGLE-2 (EAGLE-2 drafts with EAGLE-1's
# head), eagle3 -> EAGLE-3, medusa -> Medusa, sps -> SpS. Each step re-makes its artefact with the
# settings the shipped file recorded about itself (scripts/refresh_helpers.py reads them back), so a
# refreshed file differs only by what the head changes, and by what was re-timed.
#
# Order matters: the acceptance profiles feed the device-tuned trees, which the evaluation and the
# benchmarks use; the lesson's machine.json copies the forward-cost curve of the fp32 benchmark.
#
# Full-size wall time per step on this 2-core CPU when idle, for `eagle3` alone. ESTIMATES, not
# measured at full size: the benchmarks from the seconds their shipped files recorded plus the
# per-file overhead their timestamps show; the rest from the per-round costs of the idle machine
# scaled by the work. `--quick eagle3` itself took 49 min at load average 8 (other work on the two
# cores; steps 1-7: 0 / 90 / 198 / 115 / 39 / 2198 / 310 s): idle it should take well under 10.
# Two steps were also run at full size into a scratch copy with the same head, and both gave the
# shipped values exactly (only dates differ): step 5 (eagle3) took 81 s at load 6 -> 3, step 2
# (eagle3) 10 min 40 s at load 3-5 (9 min 20 s of CPU).
#   1 forget cached draft costs                       < 1 s
#   2 acceptance profile (12 prompts x 96 tokens)     ~5-10 min per profiled method
#   3 device-tuned trees, fp32 + bf16                 ~1 min  (~2 min with --remeasure-costs)
#   4 held-out evaluation                             ~2 min  (per-step on 64 held-out sequences, tau on 5 + 5 prompts)
#   5 equal-tree acceptance (6 prompts x 64 tokens)   ~1 min per method
#   6 benchmarks: 6 result files, every method        ~25 min (specbench_fp32_t0 ~8, t1 ~4, dense ~4, bf16 ~4,
#                                                              humaneval ~3, heldout ~2)
#   7 4 lesson rounds + machine.json (+ the batched round for eagle3), then replayed   ~2 min  (full size under --quick too)
#   total                                             ~40 min. eagle1 (EAGLE-1 and EAGLE-2): ~50 min;
#   medusa: ~20 min (2 result files); sps: ~12 min (specbench_fp32_t0 and machine.json only)
#
# What NO script re-makes (edit by hand after the refresh, from the refreshed files):
#   - README.md: the fp32 and bf16 Spec-Bench tables and the paragraphs quoting tau / speedups
#     (section "Results"), and the 'Serving a classroom' EAGLE-3 rows if they are re-measured
#     (`python -m specviz.serving.loadtest ...`, timed on an idle machine; tau changes the rounds per answer).
#   - assets/heads/smollm2-135m-instruct/TRAINING.md: the training story, the per-step and tau tables
#     (from eval_per_step.json / eval_tau.json), the "Same tree size for all" table (from the
#     tree_profile.json files) and the shortfalls section.
#   - assets/results/README.md: the "conditions" column (which heads ran, "EAGLE-3 trained 110 min").
#   - specviz/i18n/pages.py: the "Heads trained on a CPU, briefly" bullet (EN and ZH) quotes the
#     training data and minutes.
#   - assets/screenshots/*.png: the browser test writes them (`make test`, or
#     `.venv/bin/python -m pytest -q tests/test_browser.py`; SPECVIZ_SHOTS=DIR writes elsewhere);
#     take them from a fresh clone with an empty cache, as the shipped ones were.
#   - assets/heads/.../<head>/train_info.json, config.json, model.safetensors: the training run's.
set -euo pipefail

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
MODE=full
REMEASURE=0
BENCH=1
HEADS_ARG=""
DATA=""
WANT_DATA=0
for a in "$@"; do
  if [ "$WANT_DATA" = 1 ]; then DATA="$a"; WANT_DATA=0; continue; fi
  case "$a" in
    --data) WANT_DATA=1 ;;
    --data=*) DATA="${a#--data=}" ;;
    --dry-run) MODE=dry ;;
    --quick) MODE=quick ;;
    --remeasure-costs) REMEASURE=1 ;;
    --no-bench) BENCH=0 ;;
    -h|--help) usage ;;
    -*) echo "unknown option $a" >&2; usage ;;
    *) HEADS_ARG="$a" ;;
  esac
done
[ -n "$HEADS_ARG" ] && [ "$WANT_DATA" = 0 ] || usage
[ -z "$DATA" ] || DATA=$(cd "$DATA" 2>/dev/null && pwd) || { echo "--data: no such folder" >&2; exit 2; }

REPO=$(cd "$(dirname "$0")/.." && pwd)
PY="$REPO/.venv/bin/python"
ROOT="$REPO"
QUICK=()
if [ "$MODE" = quick ]; then
  # a throw-away copy: the commands below are the full-size ones, writing into $ROOT/assets
  WORK=$(mktemp -d /tmp/refresh_heads.XXXXXX)
  ROOT="$WORK/main"
  mkdir -p "$ROOT"
  (cd "$REPO" && git ls-files -co --exclude-standard -z -- specviz scripts assets | xargs -0 cp --parents -t "$ROOT")
  ln -s "$REPO/../shared" "$WORK/shared"  # result files name their prompts as ../shared/data/...
  REAL_CACHE=$("$PY" -c 'from specviz.runtime.loading import cache_root; print(cache_root())')
  mkdir -p "$WORK/cache/tuning"
  for d in "$REAL_CACHE"/*; do [ "$(basename "$d")" = tuning ] || ln -s "$d" "$WORK/cache/"; done
  cp "$REAL_CACHE"/tuning/*.json "$WORK/cache/tuning/" 2>/dev/null || true
  export SPECVIZ_CACHE="$WORK/cache"
  QUICK=(--quick)
  echo "quick run in $WORK (assets/ and the user cache are not touched)"
fi
cd "$ROOT"
HELPER=("$PY" scripts/refresh_helpers.py)
helper() { "${HELPER[@]}" "$@"; }
CACHE=$("$PY" -c 'from specviz.runtime.loading import cache_root; print(cache_root())')
if [ "$MODE" = quick ]; then  # the copy's code must be the one that runs
  where=$("$PY" -c 'import specviz; print(specviz.__file__)')
  case "$where" in "$ROOT"/*) ;; *) echo "specviz imports from $where, not from the copy" >&2; exit 1 ;; esac
fi

METHODS=$(helper methods "$HEADS_ARG")          # e.g. eagle1 -> eagle1,eagle2
# Step 4 needs held-out shards; without them it would stop the refresh half-way, after step 1 had
# already forgotten the cached costs. So look first.
DATA_ARG=()
[ -z "$DATA" ] || DATA_ARG=(--data "$DATA")
HELD_CHECK='import sys
from specviz.train.data import SeqData, default_data_dir
try:
    SeqData(sys.argv[1] or default_data_dir(), "heldout")  # the loader step 4 uses, and its message
except Exception as e:
    sys.exit(f"{e} Step 4 evaluates on them (make them with --n-train 0 --n-heldout 96), or name their folder with --data DIR. Nothing was changed.")'
[ "$MODE" = dry ] || "$PY" -c "$HELD_CHECK" "$DATA" || exit 2
TREE_METHODS=$(echo "$METHODS" | tr , '\n' | grep -vx sps | paste -sd, || true)  # methods with a draft tree
declare -A TOOK=()
STARTED=$(mktemp "${WORK:-/tmp}/refresh_started.XXXXXX")  # files newer than this one were written by the refresh
run() { echo "+ $*"; [ "$MODE" = dry ] || "$@"; }
step() { STEP="$1"; STEP_T0=$SECONDS; echo; echo "== $1"; }
done_step() { TOOK[$STEP]=$((SECONDS - STEP_T0)); }
echo "heads: $HEADS_ARG -> methods: $METHODS (mode: $MODE, load: $(cut -d' ' -f1-3 /proc/loadavg))"
for h in ${HEADS_ARG//,/ }; do
  f="assets/heads/smollm2-135m-instruct/$h/model.safetensors"
  [ -f "$f" ] || { echo "missing $f" >&2; exit 1; }
  echo "  $f sha256 $(sha256sum "$f" | cut -c1-16)..."
done

# 1. Cached drafting costs (user cache, tuning/*.json): a new head may draft at a different cost
#    (draft vocabulary, layers), so its `draft.<method>` entries are dropped and re-measured in step 3.
#    The target's forward curve and the per-round overhead do not depend on a head and stay; each
#    file's 1-token forward time is printed: far above ~5 ms (fp32, 2 threads, idle) means it was
#    measured on a busy machine, and --remeasure-costs is needed (it deletes the cost files whole).
step "1 forget cached draft costs of $METHODS"
FORGET=$METHODS
[ "$REMEASURE" = 0 ] || FORGET=all
run "${HELPER[@]}" forget-costs "$CACHE" "$FORGET"
done_step

# 2. Acceptance profiles (assets/heads/<model>/<head>/tree_profile.json; EAGLE-2's lives in eagle1/):
#    greedy tau at every tree size, device independent. The Compare and Why-free pages draw them, and
#    the device-tuned trees (steps 3-6) are chosen from them. Same prompts and length as recorded.
if [ -n "$TREE_METHODS" ]; then
  step "2 acceptance profiles of $TREE_METHODS"
  for m in ${TREE_METHODS//,/ }; do
    out=$(helper profile-args "$m" "${QUICK[@]}"); mapfile -t args <<< "$out"
    run "$PY" -m specviz.tuning profile "${args[@]}"
  done
  done_step
fi

# 3. Device-tuned trees: measures the drafting costs dropped in step 1 (fp32, and bf16 for the
#    bf16 benchmarks) and prints this machine's best tree per method with the new profiles. After
#    --remeasure-costs every tree method is measured here (the benchmarks run them all); the dense
#    fp32 weights' costs are measured by their benchmark in step 6, as they were first.
SHOW=$TREE_METHODS
[ "$REMEASURE" = 0 ] || SHOW=eagle1,eagle2,eagle3,medusa
if [ -n "$SHOW" ]; then
  step "3 device-tuned trees of $SHOW"
  run "$PY" -m specviz.tuning show --methods "$SHOW"
  run "$PY" -m specviz.tuning show --methods "$SHOW" --dtype bf16
  done_step
fi

# 4. Held-out evaluation (assets/heads/<model>/eval_per_step.json, eval_tau.json): per-step top-1
#    on the held-out regenerated data (in the user cache: `python -m specviz.train data` made it) and
#    tau on the engine at the device-tuned trees. These files record no settings of their own; the
#    ones here are TRAINING.md's "Reproduce the numbers". Vanilla re-runs beside the new heads so
#    their tokens/s come from one session; the other methods' entries are kept (their `dates` say so).
step "4 held-out evaluation of $METHODS"
if [ "$MODE" = quick ]; then SIZE=(--limit 1 --max-new-tokens 8); else SIZE=(--limit 5 --max-new-tokens 64); fi
REPORT=$(mktemp "${WORK:-/tmp}/refresh_eval.XXXXXX.json")
run "$PY" -m specviz.train eval --methods "vanilla,$METHODS" "${DATA_ARG[@]}" \
  --tau-prompts heldout,../shared/data/spec_bench_dev.jsonl "${SIZE[@]}" --out "$REPORT"
run "${HELPER[@]}" merge-eval "$REPORT" "vanilla,$METHODS"
done_step

# 5. Equal-tree acceptance (assets/acceptance/equal_trees.json, the Compare page's Acceptance view):
#    every method at EAGLE-1's paper-tree size. The recorded command is repeated, so the methods not
#    re-recorded are kept (record_acceptance.py merges under the same command).
if [ -n "$TREE_METHODS" ]; then
  step "5 equal-tree acceptance of $TREE_METHODS"
  out=$(helper acceptance-args "${QUICK[@]}"); mapfile -t args <<< "$out"
  run "$PY" scripts/record_acceptance.py "${args[@]}" --methods "$TREE_METHODS" --out assets/acceptance/equal_trees.json
  done_step
fi

# 6. Benchmarks (assets/results/*.json whose methods include a refreshed one): the whole file re-runs
#    with its recorded settings, every method in it, because the speedups compare methods run
#    interleaved in one session. Timings are only meaningful on an idle machine.
step "6 benchmarks that ran $METHODS"
out=$(helper results-using "$METHODS"); mapfile -t FILES <<< "$out"
for f in "${FILES[@]}"; do
  [ -n "$f" ] || continue
  if [ "$BENCH" = 0 ]; then echo "  skipped (--no-bench), still the previous head's: $f"; continue; fi
  out=$(helper bench-args "$f" "${QUICK[@]}"); mapfile -t args <<< "$out"
  run "$PY" -m specviz.bench "${args[@]}" --out "$f"
done
done_step

# 7. Lesson rounds (assets/lessons/<key>.json: each carries its head's sha256 and tests/test_lesson.py
#    replays it live, bit for bit) and machine.json (the forward curve copied from step 6's fp32
#    benchmark, and greedy EAGLE-3 vs vanilla on the lesson prompt). Fixed seeds and settings live in
#    specviz/teaching/lesson.py SPECS. Then every re-recorded round is replayed as the test does.
step "7 lesson rounds of $METHODS and machine.json"
KEYS=$(helper lesson-keys "$METHODS")
if [ -n "$KEYS" ]; then
  run "$PY" -m specviz.teaching.lesson record --only "$KEYS"
  run "$PY" -m specviz.teaching.lesson check --only "$KEYS"
else
  run "${HELPER[@]}" record-machine
fi
# The batched round of the Lesson and the serving page (assets/lessons/batch-eagle3.json, replayed by
# tests/test_batch.py) is EAGLE-3's too.
if echo ",$METHODS," | grep -q ',eagle3,'; then
  run "$PY" -m specviz.teaching.lesson_batch record
  run "$PY" -m specviz.teaching.lesson_batch check
fi
done_step

echo
echo "== wall time per step (s; mode $MODE, load now $(cut -d' ' -f1-3 /proc/loadavg))"
for s in "${!TOOK[@]}"; do echo "$s: ${TOOK[$s]}"; done | sort
if [ "$MODE" = quick ]; then
  echo; echo "== files the refresh changed (in the copy, against $REPO)"
  (cd "$ROOT" && find assets -type f -newer "$STARTED" | sort)
elif [ "$MODE" = full ]; then
  echo; git -C "$REPO" status --short -- assets
  echo "next, by hand: README.md tables, TRAINING.md, assets/results/README.md, specviz/i18n/pages.py, screenshots (see the top of $0)"
fi
