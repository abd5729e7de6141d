#!/usr/bin/env bash
# The device check in one command, for a machine with a real NVIDIA GPU (issues 4, 5 and 48):
#   1. nvml/nvlink probes vs nvidia-smi -q -x and nvidia-ml-py (tools/devcheck/nvml_check.py)
#   2. p2p probe vs PyTorch/CuPy: h2d, d2h, device-local bandwidth (tools/devcheck/p2p_check.py)
#   3. every GPU-touching probe alone: nvml (newer fields vs nvidia-ml-py), nvlink, pcie, kmsg, nic,
#      p2p, nccl single-host (vs nccl-tests' all_reduce_perf and PyTorch's NCCL), fabric discover;
#      the wedged-driver watchdog must stay quiet on a healthy driver (tools/devcheck/probes_check.py)
#   4. the wedged-driver watchdog firing: tests/engine/test_driver_wedged.py (a real probe run whose
#      NVML call never returns), where pytest and gcc are installed
#   5. the whole controller on this machine: probe run -p premigration over the local transport
#   6. the fabric probe on one host over loopback: probe run -p fabric (one host: GDR through
#      DMA-BUF and the NCCL rings of its own GPUs)
# Every step has a timeout; together they stay under 8 minutes.  Figures go to stdout and, when OUT
# is set, to $OUT.  tests/tools/test_devcheck.py checks that every GPU-touching probe is named here.
set -u
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT=${OUT:-$(mktemp -d)}
export OUT
PY=${PYTHON:-python3}
t0=$(date +%s)
step() {  # step NAME SECONDS COMMAND...: run it under a timeout, its output to $OUT/NAME.log
  local name=$1 limit=$2 status
  shift 2
  echo "=== $name (at most ${limit}s)"
  timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
  status=${PIPESTATUS[0]}
  echo "--- $name exit $status after $(( $(date +%s) - t0 ))s in all"
}
timeout 10 nvidia-smi -L
timeout 10 nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv
timeout 10 nvidia-smi -q -x >"$OUT/nvidia-smi-q.xml" 2>&1
step nvml_check 60 "$PY" tools/devcheck/nvml_check.py
step p2p_check 90 "$PY" tools/devcheck/p2p_check.py
step probes_check 130 "$PY" tools/devcheck/probes_check.py --budget 120
if "$PY" -c 'import pytest' 2>/dev/null && command -v gcc >/dev/null; then
  step watchdog 40 "$PY" -m pytest -q -p no:cacheprovider tests/engine/test_driver_wedged.py
else
  echo "=== watchdog: skipped (needs pytest and gcc for the fake wedged libnvidia-ml)"
fi
step premigration 80 "$PY" -m orchestrator run -i inventories/localhost.yml -p premigration \
  --results "$OUT/results" --show gpus,topo,p2p -o "$OUT/run"
step fabric_loopback 40 "$PY" -m orchestrator run -i inventories/localhost.yml -p fabric \
  --results "$OUT/results" -o "$OUT/fabric-run"
echo "device check done in $(( $(date +%s) - t0 ))s; logs in $OUT"
