#!/usr/bin/env bash
# GPU check of jaxfp8.ops and the recipes in one call of at most 6 minutes
# (two fit a 15-minute device budget): the compiled kernel tests (Mosaic GPU
# and Triton), then benchmarks/gpu_check.py (correctness against float64 on
# poisoned outputs, TFLOP/s against XLA and bf16, one training step per
# recipe against bf16; lowest priority skipped first when time runs short).
# Run from anywhere; needs a CUDA GPU (H100/H200: the Mosaic kernels need
# compute capability 9.0). On the device tool: bash benchmarks/gpu_check.sh
# (timeout_s=360). Extra arguments go to gpu_check.py (e.g. --sizes 4096,
# --sweep, --recipes bf16,fp8_blockwise). The log and JSON go to $OUT (the
# device tool's output folder), else ./gpu_check_out.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${OUT:-gpu_check_out}
mkdir -p "$OUT_DIR"
export OUT="$OUT_DIR" PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
LOG="$OUT_DIR/gpu_check.log"
: > "$LOG"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm \
  --format=csv 2>&1 | tee -a "$LOG" || echo "nvidia-smi not available" | tee -a "$LOG"
# 350 s for everything below leaves the 360 s call room to return the log.
END=$((SECONDS + 350))
# The GPU image has no pytest-xdist, haiku or jmp: the ini's addopts
# (-n auto, --doctest-modules) are dropped, and conftest.py (hypothesis
# settings and CPU compile flags, unused here) is not loaded, so tests/ goes
# on the path itself (the float64 references, tests/kernel_reference.py).
# The Mosaic tests come first: they test what the library runs on Hopper.
TESTS=()
for t in tests/kernels/*/test_*_mosaic_gpu.py tests/kernels/*/test_*_triton.py \
    tests/kernels/*/test_*_api.py; do
  [ -f "$t" ] && TESTS+=("$t")
done
TESTS_TIMEOUT=${TESTS_TIMEOUT:-120}
echo "== compiled kernel tests (${TESTS[*]}, at most ${TESTS_TIMEOUT} s)" | tee -a "$LOG"
PYTHONPATH="$PYTHONPATH:tests" timeout "$TESTS_TIMEOUT" "$PY" -m pytest -q \
  "${TESTS[@]}" -p no:cacheprovider -p no:xdist -o addopts="" --noconftest \
  -rs --durations=10 2>&1 \
  | tee -a "$LOG" | tail -n 50
TESTS_RC=${PIPESTATUS[0]}
[ "$TESTS_RC" -eq 124 ] && echo "compiled kernel tests: stopped at ${TESTS_TIMEOUT} s" | tee -a "$LOG"
LEFT=$((END - SECONDS))
echo "== gpu_check.py (${LEFT} s left)" | tee -a "$LOG"
# gpu_check.py skips what would end past --budget (the margin covers its
# start-up, an estimate that falls short, and its summary); timeout's SIGTERM
# makes it print and write what it has, and -k kills it 8 s later if it can't.
timeout -k 8 $((LEFT - 8)) "$PY" benchmarks/gpu_check.py --budget $((LEFT - 30)) "$@" \
  2>&1 | tee -a "$LOG"
CHECK_RC=${PIPESTATUS[0]}
echo "tests rc=$TESTS_RC, gpu_check rc=$CHECK_RC (log: $LOG)"
[ "$TESTS_RC" -eq 0 ] && [ "$CHECK_RC" -eq 0 ]
