#!/usr/bin/env bash
# One-command check of aotplan on a GPU machine (NVIDIA, jax with the CUDA plugin; no
# network needed), run from anywhere inside the repository:
#
#     scripts/gpu_check.sh [ARGS FOR bench_replay.py ...]
#
# 1. environment: nvidia-smi -L, python/jax/jaxlib versions, jax devices
# 2. compile the example models (mlp, cnn, transformer) in each launch mode (sink,
#    fused, kernel; plus a sink plan with embedded native executables) and replay each
#    with `aotplan replay PLAN --random-inputs --steps 20 --check-alloc`
# 3. python -m pytest -q on the model, in-place, deploy, serving, load-args and feeds tests
#    (if pytest is there; at float32 precision: JAX_DEFAULT_MATMUL_PRECISION=highest, see below)
# 4. python scripts/bench_replay.py ARGS (default settings when no ARGS)
#
# Every step's output goes to stdout and to log files in ${OUT:-/tmp/gpu_check}:
# gpu_check.log (everything), 1_env.log, 2_compile_replay.log, 3_pytest.log,
# 4_bench_replay.log, summary.log. A failing step does not stop the later ones; the
# script exits 1 if any step failed. On a machine without a GPU it runs the same steps
# on the CPU (e.g. `scripts/gpu_check.sh --quick` as a smoke test); on a machine with
# nvidia-smi where jax does not see the GPU it stops at once (everything after would
# silently measure the CPU).
set -euo pipefail

# GPU memory: by default JAX's allocator grabs 75% of the GPU's memory when the first
# array is made (XLA_PYTHON_CLIENT_PREALLOCATE=true). Then the process holds most of the
# card whatever it uses: nvidia-smi and the allocator's reserved/pool figures in
# device.memory_stats() show the preallocated pool, not the plan's real use, and a
# second process started while the first one lives (bench_replay.py times fresh
# processes while its own process holds the GPU) finds only a quarter of the card.
# With preallocation off the allocator grows on demand, so memory_stats() (bytes in
# use, peak, reserved; what `replay --check-alloc` compares with the plan's stated
# memory) and nvidia-smi reflect what is really used. It must be set before Python
# (and jax) starts, hence exported here.
export XLA_PYTHON_CLIENT_PREALLOCATE=false

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT_DIR="${OUT:-/tmp/gpu_check}"
mkdir -p "$OUT_DIR"
LOG="$OUT_DIR/gpu_check.log"
SUMMARY="$OUT_DIR/summary.log"
: > "$LOG"
: > "$SUMMARY"
PY="${PYTHON:-$(command -v python3 || command -v python)}"  # the GPU image: python3 holds jax
# the repository's packages, for the scripts run by path (aotplan may not be pip-installed here)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
PLANS="$(mktemp -d "${TMPDIR:-/tmp}/gpu_check_plans.XXXXXX")"
trap 'rm -rf "$PLANS"' EXIT
FAILED=()

say() { echo "$*" | tee -a "$LOG"; }

# run STEPLOG LABEL CMD...: run CMD, its stdout+stderr to the terminal, STEPLOG and the
# main log; record a failure instead of stopping.
run() {
    local steplog="$1" label="$2"
    shift 2
    local t0=$SECONDS rc=0
    echo "\$ $*" | tee -a "$OUT_DIR/$steplog" "$LOG"
    "$@" 2>&1 | tee -a "$OUT_DIR/$steplog" "$LOG" || rc=$?
    local line="$label: $([ "$rc" = 0 ] && echo ok || echo "FAILED (exit $rc)") in $((SECONDS - t0)) s"
    echo "$line" | tee -a "$SUMMARY" "$LOG"
    [ "$rc" = 0 ] || FAILED+=("$label")
    return 0
}

# ------------------------------------------------------------------ 1. environment
: > "$OUT_DIR/1_env.log"
say "== 1. environment ($(date -u +%Y-%m-%dT%H:%M:%SZ); XLA_PYTHON_CLIENT_PREALLOCATE=$XLA_PYTHON_CLIENT_PREALLOCATE)"
HAVE_NVIDIA=0
if command -v nvidia-smi > /dev/null 2>&1; then
    HAVE_NVIDIA=1
    run 1_env.log "nvidia-smi -L" nvidia-smi -L
    run 1_env.log "nvidia-smi" nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
else
    say "nvidia-smi: not found (no NVIDIA driver here): the steps below run on whatever jax finds"
fi
run 1_env.log "versions" "$PY" -c '
import sys, jax, jaxlib
print("python", sys.version.split()[0], "| jax", jax.__version__, "| jaxlib", jaxlib.__version__)
try:
    from importlib.metadata import distributions
    pkgs = sorted({(d.metadata.get("Name") or "") + " " + d.version for d in distributions()})
    print("jax packages:", ", ".join(p for p in pkgs if "jax" in p.lower()))
except Exception as e:
    print("package list unavailable:", e)
'
BACKEND="$("$PY" -c 'import jax; print(jax.default_backend())' 2>> "$OUT_DIR/1_env.log" | tail -n 1 || true)"
run 1_env.log "jax devices" "$PY" -c '
import jax
print("default backend:", jax.default_backend())
for d in jax.devices():
    try:
        stats = d.memory_stats() or {}
    except Exception:
        stats = {}
    print(" ", d, "|", d.device_kind, "| memory_stats:", "bytes_limit %s" % stats.get("bytes_limit") if stats else "none")
'
if [ "$HAVE_NVIDIA" = 1 ] && [ "$BACKEND" != "gpu" ]; then
    say "FAILED: nvidia-smi sees a GPU but jax's default backend is '${BACKEND:-?}' (is the CUDA plugin installed" \
        "and matching the driver? see the jax devices output above); stopping"
    echo "jax backend: FAILED (got '${BACKEND:-?}', expected gpu)" | tee -a "$SUMMARY" "$LOG"
    exit 1
fi

# ------------------------------------------------------------------ 2. compile + replay
: > "$OUT_DIR/2_compile_replay.log"
say ""
say "== 2. compile the examples in each launch mode; replay --random-inputs --steps 20 --check-alloc"
for model in mlp cnn transformer; do
    for mode in sink fused kernel native; do
        plan="$PLANS/$model.$mode.plan"
        n0="$(wc -l < "$OUT_DIR/2_compile_replay.log")"  # this mode's lines follow
        if [ "$mode" = native ]; then  # a sink plan with this host's executables embedded
            run 2_compile_replay.log "compile $model $mode" \
                "$PY" -m aotplan.cli compile "plans/examples/$model/model.json" -o "$plan" --launch sink --embed-executables
            [ -f "$plan" ] || continue
            run 2_compile_replay.log "replay $model $mode" \
                "$PY" -m aotplan.cli replay "$plan" --random-inputs --steps 20 --check-alloc --trust-executables
            n_native="$(tail -n "+$((n0 + 1))" "$OUT_DIR/2_compile_replay.log" | grep -c "(native kernels" || true)"
            if [ "${n_native:-0}" = 0 ]; then
                say "note: $model native plan did not load native kernels here (see the replay line above)"
            fi
        else
            run 2_compile_replay.log "compile $model $mode" \
                "$PY" -m aotplan.cli compile "plans/examples/$model/model.json" -o "$plan" --launch "$mode"
            [ -f "$plan" ] || continue
            run 2_compile_replay.log "replay $model $mode" \
                "$PY" -m aotplan.cli replay "$plan" --random-inputs --steps 20 --check-alloc
        fi
        # the replay line names kernels that took a slower path than the plan's own
        # (aotplan.core.kernels.paths_note): on this device, a direct compile or adoption failed
        slow="$(tail -n "+$((n0 + 1))" "$OUT_DIR/2_compile_replay.log" \
            | grep -o "[0-9]* of [0-9]* [a-z]* via exported.call\|[0-9]* of [0-9]* native, called from Python" || true)"
        if [ -n "$slow" ]; then
            echo "note: $model $mode: kernels on a slower path: $(echo $slow)" | tee -a "$SUMMARY" "$LOG"
        fi
    done
done

# ------------------------------------------------------------------ 3. tests
: > "$OUT_DIR/3_pytest.log"
say ""
say "== 3. tests"
if "$PY" -c "import pytest" > /dev/null 2>&1; then
    # The tests' tolerances are float32's. On NVIDIA GPUs JAX's default precision runs
    # float32 matmuls and convolutions in TF32 (10-bit mantissa): the plan and the direct
    # evaluation then differ by ~1e-3 (measured on an H200: up to 1.3e-3 absolute on the
    # transformer). The tests run at full float32 precision; plans compiled without it
    # keep JAX's default (TF32), as jax.jit does.
    # models and in-place steps; then the executor's loading paths on this device (the
    # direct compile of StableHLO, --target both, native kernels adopted after the first
    # step, device arrays, threads), whose CPU-host-only cases skip themselves
    run 3_pytest.log "pytest models, in-place, deploy, serving, load args, feeds (at highest precision)" \
        env JAX_DEFAULT_MATMUL_PRECISION=highest "$PY" -m pytest -q -rs tests/compiler/test_models.py tests/executor/test_inplace.py \
        tests/executor/test_deploy.py tests/executor/test_serving.py tests/executor/test_load_args.py tests/executor/test_feeds.py
else
    echo "pytest is not installed: tests skipped" | tee -a "$SUMMARY" "$LOG"
fi

# ------------------------------------------------------------------ 4. benchmark
: > "$OUT_DIR/4_bench_replay.log"
say ""
say "== 4. scripts/bench_replay.py $*"
run 4_bench_replay.log "bench_replay.py $*" "$PY" scripts/bench_replay.py "$@"

# ------------------------------------------------------------------ summary
say ""
say "== summary (logs in $OUT_DIR)"
tee -a "$LOG" < "$SUMMARY"
if [ "${#FAILED[@]}" -gt 0 ]; then
    say "FAILED steps: ${FAILED[*]}"
    exit 1
fi
say "all steps ok"
