#!/usr/bin/env bash
# tools/gpu-check.sh WHEEL_DIR OUT_DIR: the run on a GPU machine (H100/H200, CUDA 13.0 driver,
# Python 3.12 with PyTorch for CUDA 13.0 and its nvidia-* packages, pytest, hypothesis; no
# Rust and no package registry), from the repository root.
#
# Installs the CUDA wheel built by tools/build-cuda-wheel.sh (WHEEL_DIR, Python 3.12) without
# the network, then writes into OUT_DIR:
#   env.txt         the machine, the driver, the build gradstream loaded
#   test_cuda.log   tests/test_cuda.py
#   suite.log       the suite with CUDA as the default device (GRADSTREAM_TEST_DEVICE=cuda)
#   bench.log, bench/results.{json,md} and the charts: python -m gradstream.bench --device cuda
#                   --quick (its headline figures at the end of bench.log)
#   bench_max_batch.log, bench/max_batch.{json,md,png}: the largest NeRF batch within 8 GiB
# The candle rows need the candle program built with CUDA by tools/build-candle-cuda.sh into
# WHEEL_DIR (WHEEL_DIR/candle-bench); without it they are reported as skipped.
# The whole run ends within 8 minutes on 16 cores: every step has a time limit, cut further
# so that the steps after it keep their share of BUDGET seconds (450 by default), and the
# benches stop starting configurations before theirs, so their results are written. A step
# that fails, or that has too little time left to start, does not stop the next. The exit
# status is the number of steps that failed or did not run.
set -uo pipefail

if [[ $# -ne 2 ]]; then
    echo "usage: $0 WHEEL_DIR OUT_DIR" >&2
    exit 2
fi
WHEELS=$1
OUT=$2
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
failed=0
BUDGET=${BUDGET:-450}
START=$SECONDS
limit_for() { # limit_for SECONDS RESERVE: SECONDS, or less so that RESERVE of BUDGET is left
    local left=$((BUDGET - (SECONDS - START) - $2))
    echo $((left < $1 ? left : $1))
}
step() { # step NAME SECONDS COMMAND...: run, log, time-limit
    local name=$1 limit=$2
    shift 2
    if ((limit < 30)); then
        echo "== $name: not run, ${limit}s left of the budget" | tee "$OUT/$name.log"
        failed=$((failed + 1))
        return
    fi
    echo "== $name (limit ${limit}s)"
    local t0=$SECONDS
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "   exit $rc after $((SECONDS - t0))s"
    tail -n 5 "$OUT/$name.log"
    [[ $rc -eq 0 ]] || failed=$((failed + 1))
}

SITE=$(mktemp -d)
"$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" \
    "$WHEELS"/gradstream-*cp312*.whl || exit 1
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}

{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    "$PY" - <<'EOF'
import gradstream, torch
print("gradstream build:", gradstream._build.chosen)
print("cuda available:", gradstream.cuda.is_available(), gradstream.cuda.device_count())
if gradstream.cuda.is_available():
    print("device:", gradstream.cuda.get_device_name(), gradstream.cuda.get_device_capability())
print("torch:", torch.__version__, torch.cuda.is_available())
EOF
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

TIMEOUT=(-p no:cacheprovider -o addopts= -q -rfE --timeout=60)
# Reserves: the suite keeps at least 120 s after test_cuda, the two benches 200 s after the
# suite, the max-batch search 70 s after the bench.
step test_cuda "$(limit_for 90 320)" "$PY" -m pytest "${TIMEOUT[@]}" tests/test_cuda.py
step suite "$(limit_for 300 200)" env GRADSTREAM_TEST_DEVICE=cuda CUDA_LAUNCH_BLOCKING=1 "$PY" -m pytest \
    "${TIMEOUT[@]}" -n "${WORKERS:-12}" --maxfail=500 tests
# The candle program needs no Rust here: tools/build-candle-cuda.sh builds it into WHEEL_DIR.
CANDLE=()
[[ -x $WHEELS/candle-bench ]] && CANDLE=(--candle-bin "$WHEELS/candle-bench")
# --time-limit: configurations (probes) stop starting 25 s (20 s) before the step's limit, for
# the data of the one that starts last, the report and the charts.
limit=$(limit_for 130 70)
step bench "$limit" "$PY" -m gradstream.bench --device cuda --quick \
    --time-limit $((limit - 25)) --out "$OUT/bench" --plain-progress ${CANDLE[@]+"${CANDLE[@]}"}
limit=$(limit_for 110 0)
step bench_max_batch "$limit" "$PY" -m gradstream.bench --device cuda --max-batch 8GiB \
    --quick --time-limit $((limit - 20)) --out "$OUT/bench" --plain-progress \
    ${CANDLE[@]+"${CANDLE[@]}"}
exit $failed
