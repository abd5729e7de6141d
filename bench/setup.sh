#!/bin/sh
# Installs what the fleet benchmark compares against and builds with (not needed by the test suite):
#   parallel-ssh (Debian package pssh), sshd, gcc (the fake libnvidia-ml/libcuda of the audit
#   fixtures) and ansible-core (ansible, ansible-playbook) in its own venv, so it cannot disturb
#   /work/venv.  Then, as root, run the command printed at the top of bench/RESULTS.md, e.g.
#   BENCH_ANSIBLE=/tmp/ansible-venv/bin/ansible /work/venv/bin/python bench/fleet_bench.py --audit-sizes 10,100
#   /work/venv/bin/python bench/fleet_bench.py --selfcheck    # controller vs host-side CPU split
set -eu
VENV=${BENCH_ANSIBLE_VENV:-/tmp/ansible-venv}
if ! command -v parallel-ssh >/dev/null 2>&1 || ! command -v sshd >/dev/null 2>&1 \
        || ! command -v gcc >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pssh openssh-server openssh-client gcc
fi
if [ ! -x "$VENV/bin/ansible" ] || [ ! -x "$VENV/bin/ansible-playbook" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q ansible-core
fi
# asyncssh: bench/replayserver.py, the one-process replaying endpoint (--replay asyncssh), in the
# interpreter that runs fleet_bench.py (it starts the server with its own sys.executable)
PY=${BENCH_PYTHON:-/work/venv/bin/python}
"$PY" -c 'import asyncssh' 2>/dev/null || "$PY" -m pip install -q asyncssh
echo "parallel-ssh $(parallel-ssh --version 2>&1)"
"$VENV/bin/ansible" --version | sed -n 1p
echo "export BENCH_ANSIBLE=$VENV/bin/ansible"
