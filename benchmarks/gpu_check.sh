#!/usr/bin/env bash
# GPU check of jaxfp8.ops in one call of at most 6 minutes (two fit a
# 15-minute device budget): the compiled kernel tests, then
# benchmarks/gpu_check.py (correctness against float64, TFLOP/s against XLA).
# Run from anywhere; needs a CUDA GPU (H100/H200 for the targets). On the
# device tool: bash benchmarks/gpu_check.sh (timeout_s=360). Extra arguments
# go to gpu_check.py (e.g. --sizes 4096, --sweep). The log goes to $OUT (the
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
# settings, unused here) is not loaded.
echo "== compiled kernel tests" | tee -a "$LOG"
timeout 150 "$PY" -m pytest -q tests/kernels/test_kernels.py -p no:cacheprovider \
  -p no:xdist -o addopts="" --noconftest -rs 2>&1 | tee -a "$LOG" | tail -n 40
TESTS_RC=${PIPESTATUS[0]}
LEFT=$((END - SECONDS))
echo "== gpu_check.py (${LEFT} s left)" | tee -a "$LOG"
# The script skips the e5m2 / second MX format timings past --budget.
timeout "$LEFT" "$PY" benchmarks/gpu_check.py --budget $((LEFT - 90)) "$@" \
  2>&1 | tee -a "$LOG"
CHECK_RC=${PIPESTATUS[0]}
echo "tests rc=$TESTS_RC, gpu_check rc=$CHECK_RC (log: $LOG)"
[ "$TESTS_RC" -eq 0 ] && [ "$CHECK_RC" -eq 0 ]
