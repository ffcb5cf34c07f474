#!/usr/bin/env bash
# GPU check of jaxfp8.ops (correctness + TFLOP/s against XLA), in one call of
# at most 10 minutes. Run from anywhere; needs a CUDA GPU (H100/H200 for the
# targets). On the device tool: bash benchmarks/gpu_check.sh
# Extra arguments go to gpu_check.py (e.g. --skip-sweep, --sizes 4096).
set -uo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm \
  --format=csv 2>/dev/null || echo "nvidia-smi not available"
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
LOG=${OUT:-/tmp}/gpu_check.log
# 570 s leaves the caller's 600 s limit room to return the log.
timeout 570 "$PY" benchmarks/gpu_check.py "$@" 2>&1 | tee "$LOG"
exit "${PIPESTATUS[0]}"
