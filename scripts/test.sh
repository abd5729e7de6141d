#!/usr/bin/env bash
# Set up everything the tests need on a fresh Debian/Ubuntu machine, then run lint, types and tests.
# Idempotent: a second run reuses .venv and skips installed packages.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || need_apt+=(openssh-server)
command -v ssh >/dev/null 2>&1 || need_apt+=(openssh-client)
command -v ssh-keygen >/dev/null 2>&1 || need_apt+=(openssh-client)
command -v gcc >/dev/null 2>&1 || need_apt+=(gcc libc6-dev)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium chromium-driver)
command -v lspci >/dev/null 2>&1 || need_apt+=(pciutils)
# jq reads stored forms as a user would (tests/bench/test_codec_forms.py).
command -v jq >/dev/null 2>&1 || need_apt+=(jq)
# pssh through the fan-out benchmark's replaying endpoint (tests/bench/test_replay_endpoint.py).
command -v parallel-ssh >/dev/null 2>&1 || need_apt+=(pssh)
# A real Slurm for tests/cli/test_slurm.py (munged, slurmctld and emulated slurmd nodes, on loopback).
command -v slurmctld >/dev/null 2>&1 || [ -x /usr/sbin/slurmctld ] || need_apt+=(slurm-wlm)
command -v munged >/dev/null 2>&1 || [ -x /usr/sbin/munged ] || need_apt+=(munge)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing: ${need_apt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  else
    echo "warning: missing ${need_apt[*]} (not root or no apt-get): the tests that need them are skipped" >&2
  fi
fi

PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test]'
# NVIDIA's NVML bindings and NCCL (the nvlibs extra: tests/engine/test_nvml_bindings.py,
# test_nccl_real_lib.py); pip's cache keeps the ~350 MB NCCL wheel for the next run.  Where they
# cannot be had the tests that need them skip with the command, which fails under CI=true.
.venv/bin/python -m pip install -q -e '.[nvlibs]' ||
  echo "warning: the nvlibs extra (nvidia-ml-py, nvidia-nccl-cu12) did not install: its tests are skipped" >&2
# ansible-test (ansible-core, in the test extra) installs its own sanity requirements from the index
# when tests/api/test_ansible_sanity.py runs it, into .pytest_cache/d/ansible-test-home (made once).

.venv/bin/ruff check orchestrator probes tests bench tools
.venv/bin/mypy

# The controller runs on every Python that requires-python admits (3.9-3.13: Ubuntu 22.04 has
# 3.10, RHEL 9 3.9): the fast tier of the suite runs on each of those interpreters this machine
# has besides .venv's (pyenv keeps them on the CI image), in a venv of its own, as many at once as
# there are cores; the full suite then runs once, on .venv's.  FLEETPROBE_PYTHONS="3.9 3.12"
# narrows the list.  The fast tier is the controller's own code: the tests that run the probes
# themselves are left to .venv's run (probes are Python 3.6+ and run on the hosts' interpreters,
# which tests/engine/test_runner_interpreter.py covers from 2.7 to today's).
FAST_TIER=(tests/verdict tests/facts tests/store tests/present tests/inventory tests/layout tests/engine
           tests/cli/test_exit_codes.py tests/cli/test_cli_usage_errors.py tests/cli/test_interrupt_edges.py
           --ignore=tests/engine/test_p2p.py --ignore=tests/engine/test_p2p_dmabuf.py
           --ignore=tests/engine/test_runner_latency.py --ignore=tests/engine/test_runner_bundle.py
           --ignore=tests/engine/test_nccl_probe.py --ignore=tests/engine/test_nccl_bundle.py
           --ignore=tests/engine/test_nvml_probes.py --ignore=tests/engine/test_driver_wedged.py
           --ignore=tests/engine/test_kmsg_nic_probes.py --ignore=tests/engine/test_nvml_bindings.py
           --ignore=tests/engine/test_nccl_real_lib.py
           # the normalizers' differential digests hold the words of Python's own exception messages,
           # which differ between interpreters ("a number" / "a real number"): compared on .venv's only
           --deselect tests/facts/test_normalize_differential.py::test_mutated_and_faulty_inputs_give_the_stored_outputs)
main_version=$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
find_python() {  # an interpreter of version $1 that runs, or nothing
  local v=$1 candidate
  for candidate in "$(command -v "python$v" 2>/dev/null)" "$HOME"/.pyenv/versions/"$v".*/bin/python"$v"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ] && "$candidate" -c 'import sys' >/dev/null 2>&1; then
      echo "$candidate"
      return
    fi
  done
}
ran=("$main_version (.venv, full suite)")
tiers=()
for v in ${FLEETPROBE_PYTHONS:-3.9 3.10 3.11 3.12 3.13}; do
  [ "$v" = "$main_version" ] && continue
  py=$(find_python "$v")
  [ -n "$py" ] || continue
  venv=".venv-py$v"
  # installed one after another: editable installs share the checkout's build metadata
  [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
  "$venv/bin/python" -m pip install -q -e '.[test]'
  tiers+=("$v")
done
# The fast tiers run one after another beside the full suite, at a lower priority: the full suite
# waits on sshd, Slurm, ansible and browsers for much of its time (its processes, the daemons it
# starts included, kept 0.92 of the 2 cores busy on average: 1,617 CPU s in 1,752 s), and the
# tiers, run before it, added about nine minutes to CI.  Each tier's output is printed once the full
# suite is done.
logs=$(mktemp -d)
tiers_pid=
# the script's exit, however it comes, stops any tier still running
trap 'if [ -n "$tiers_pid" ]; then pkill -P "$tiers_pid" 2>/dev/null; kill "$tiers_pid" 2>/dev/null; fi; rm -rf "$logs"' EXIT
# Ctrl-C: the tiers run in the background, where a script's jobs ignore SIGINT, so without this the
# script would wait for them after pytest stops
trap 'exit 130' INT TERM
if [ ${#tiers[@]} -gt 0 ]; then
  (
    for v in "${tiers[@]}"; do
      status=0
      nice -n 10 ".venv-py$v/bin/python" -m pytest -q -p no:cacheprovider -m "not slow and not browser" \
        "${FAST_TIER[@]}" >"$logs/$v.log" 2>&1 || status=$?
      echo "$status" >"$logs/$v.status"
    done
  ) &
  tiers_pid=$!
fi
suite_status=0
.venv/bin/python -m pytest -q "$@" || suite_status=$?
[ -z "$tiers_pid" ] || wait "$tiers_pid"
tiers_pid=
failed=()
for v in "${tiers[@]}"; do
  echo "== Python $v ($(".venv-py$v/bin/python" -c 'import sys; print(sys.executable)')): the fast tier"
  cat "$logs/$v.log"
  if [ "$(cat "$logs/$v.status" 2>/dev/null)" = 0 ]; then ran+=("$v (fast tier)"); else failed+=("$v"); fi
done
printf 'interpreters: %s\n' "${ran[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "the fast tier failed on Python ${failed[*]}" >&2
  exit 1
fi
exit "$suite_status"
