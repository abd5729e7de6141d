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
# ansible-test (ansible-core, in the test extra) installs its own sanity requirements from the index
# when tests/api/test_ansible_sanity.py runs it, into .pytest_cache/d/ansible-test-home (made once).

.venv/bin/ruff check orchestrator probes tests bench tools
.venv/bin/mypy
exec .venv/bin/python -m pytest -q "$@"
