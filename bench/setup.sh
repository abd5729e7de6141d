#!/bin/sh
# Installs the peers the fleet benchmark compares against (not needed by the test suite):
#   parallel-ssh (Debian package pssh) and ansible-core in its own venv, so it cannot disturb
#   /work/venv.  Then run the command printed at the end of bench/RESULTS.md, e.g.
#   BENCH_ANSIBLE=/tmp/ansible-venv/bin/ansible /work/venv/bin/python bench/fleet_bench.py
set -eu
VENV=${BENCH_ANSIBLE_VENV:-/tmp/ansible-venv}
if ! command -v parallel-ssh >/dev/null 2>&1 || ! command -v sshd >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pssh openssh-server openssh-client
fi
if [ ! -x "$VENV/bin/ansible" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q ansible-core
fi
echo "parallel-ssh $(parallel-ssh --version 2>&1)"
"$VENV/bin/ansible" --version | sed -n 1p
echo "export BENCH_ANSIBLE=$VENV/bin/ansible"
