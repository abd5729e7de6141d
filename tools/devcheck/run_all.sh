#!/usr/bin/env bash
# The device check of issues 4 and 5 in one go, for a machine with a real NVIDIA GPU:
#   1. nvml/nvlink probes vs nvidia-smi -q -x and nvidia-ml-py (tools/devcheck/nvml_check.py)
#   2. p2p probe vs PyTorch/CuPy: h2d, d2h, device-local bandwidth (tools/devcheck/p2p_check.py)
#   3. the whole controller on this machine: probe run -p premigration over the local transport
# Figures go to stdout and, when OUT is set, to $OUT.
set -u
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT=${OUT:-$(mktemp -d)}
PY=${PYTHON:-python3}
nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv
echo "=== nvml check"; timeout 120 "$PY" tools/devcheck/nvml_check.py 2>&1 | tee "$OUT/nvml_check.log"
echo "=== p2p check"; timeout 200 "$PY" tools/devcheck/p2p_check.py 2>&1 | tee "$OUT/p2p_check.log"
echo "=== probe run (premigration, local transport)"
start=$(date +%s.%N)
timeout 200 "$PY" -m orchestrator run -i inventories/localhost.yml -p premigration --results /tmp/fp-dev \
  --show gpus,topo,p2p -o /tmp/fp-dev/run 2>&1 | tee "$OUT/probe_run.log"
echo "probe run exit $? wall $(echo "$(date +%s.%N) - $start" | bc 2>/dev/null)"
cp /tmp/fp-dev/run/fleet.json "$OUT/fleet.json" 2>/dev/null || true
