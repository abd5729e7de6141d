"""Out of file descriptors on the controller.  A soft limit below the hard one is raised at start;
under a hard limit too low for --forks, fewer hosts are probed at once and the run says so; and
where descriptors run out all the same, the host's reason says "too many open files" (libraries
hide it: getpwuid() out of descriptors says the user does not exist).  Never exit 70, every
other host judged."""

from __future__ import annotations

import errno
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.engine.descriptors import forks_within, raise_soft_limit
from orchestrator.engine.runner import controller_error
from tests.support.hostile import ROOT_DIR, cli_env, interpreter, inventory, load_fleet, only_run_dir
from tests.support.sshd import SshdServer

HOSTS = 40


def _limited(limit: int) -> object:
    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    return low_limit


def test_forks_past_the_hard_limit_are_fitted_to_it_and_every_host_is_probed(tmp_path: Path) -> None:
    # every host holds its pipes for a moment, so 40 at once need ~40 x 6 descriptors
    slow = interpreter(tmp_path / "bin", "slow", "import time; time.sleep(1.5)\n"
                       "print(json.dumps({'envelope_version': 1, 'probe': 'host', 'probe_version': '1',"
                       " 'status': 'ok', 'data': {}, 'errors': [], 'warnings': [], 'duration_s': 0.1}))")
    inv = inventory(tmp_path / "inv.yml", {f"h{i:02d}": {"ansible_python_interpreter": str(slow)}
                                           for i in range(HOSTS)})
    results = tmp_path / "results"
    limit = 96
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "run", "-i", str(inv), "--probe", "host",
                           "--results", str(results), "-f", str(HOSTS), "-t", "20"],
                          capture_output=True, text=True, env=cli_env(), cwd=str(ROOT_DIR),
                          preexec_fn=_limited(limit), timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    fits = forks_within(HOSTS, limit)
    assert f"{fits} host(s) at a time, not {HOSTS}" in proc.stderr and "ulimit -n" in proc.stderr, proc.stderr
    fleet = load_fleet(only_run_dir(results))
    assert [h["outcome"] for h in fleet["hosts"]] == ["ok"] * HOSTS


def test_an_ssh_fleet_under_ulimit_64_is_probed_not_failed_with_a_riddle(sshd: SshdServer, tmp_path: Path) -> None:
    hosts = sshd.fleet(12)
    inv = tmp_path / "fleet.yml"
    inv.write_text(sshd.inventory_yaml(hosts))
    results = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "run", "-i", str(inv), "--probe", "host",
                           "--results", str(results), "-f", "12", "--ssh-config", str(sshd.ssh_config)],
                          capture_output=True, text=True, env=cli_env(), cwd=str(ROOT_DIR),
                          preexec_fn=_limited(64), timeout=300)
    assert proc.returncode in (0, 4), proc.stderr[-3000:]
    fleet = load_fleet(only_run_dir(results))
    reasons = {h["name"]: h["reason"] for h in fleet["hosts"] if h["outcome"] != "ok"}
    assert all("too many open files" in r for r in reasons.values()), reasons
    assert not any("getpwuid" in r or "KeyError" in r for r in reasons.values()), reasons
    assert len(reasons) < len(hosts), "fitted to the limit, the hosts are probed"


def test_a_hidden_exhaustion_is_named_for_what_it_is() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held: list[int] = []
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
        with pytest.raises(OSError) as exhausted:
            while True:
                held.append(os.open(os.devnull, os.O_RDONLY))
        assert exhausted.value.errno == errno.EMFILE
        # what getpwuid() says when it cannot open /etc/passwd
        reason = controller_error(KeyError("getpwuid(): uid not found: 0"))
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert "too many open files" in reason and "ulimit -n 256" in reason, reason
    assert "KeyError" in controller_error(KeyError("a real bug")), "with descriptors left, the error is the error"


def test_the_soft_limit_is_raised_to_what_the_hard_limit_allows() -> None:
    code = ("import resource\nfrom orchestrator.engine.descriptors import raise_soft_limit\n"
            "print(raise_soft_limit(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])")
    hard = min(4096, resource.getrlimit(resource.RLIMIT_NOFILE)[1])

    def soft_below_hard() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(),
                         preexec_fn=soft_below_hard, timeout=60, check=True).stdout.split()
    assert out == [str(hard), str(hard)], out
    assert raise_soft_limit() >= 64
