"""Become as Ansible means it: `ansible_become_user` is who the probe runs as (`sudo -n -u USER`),
and a become method fleetprobe cannot honour is a usage error before anything runs (it used to be
ignored silently: the probe ran as root via `sudo -n`)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.support.hostile import cli_env, host_record, inventory, load_fleet, only_run_dir, run_cli

# Stands in for sudo: records how it was called, then runs the command after `--` as sudo would.
FAKE_SUDO = """#!/bin/sh
printf '%s\\n' "$*" >> "{log}"
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do shift; done
shift
exec "$@"
"""


def _fake_sudo(tmp_path: Path) -> tuple[dict[str, str], Path]:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "sudo.log"
    (bindir / "sudo").write_text(FAKE_SUDO.format(log=log))
    (bindir / "sudo").chmod(0o755)
    return cli_env(PATH=f"{bindir}:{os.environ['PATH']}"), log


def test_become_user_is_passed_to_sudo(tmp_path: Path) -> None:
    env, log = _fake_sudo(tmp_path)
    inv = inventory(tmp_path / "inv.yml", {
        "asuser01": {"ansible_become": True, "ansible_become_user": "gpuaudit"},
        "asroot01": {"ansible_become": True},
    })
    results = tmp_path / "results"
    res = run_cli(["run", "-i", str(inv), "--probe", "host", "--results", str(results)], env=env)
    assert res.code in (0, 1), res.stderr
    calls = log.read_text().splitlines()
    assert any(c.startswith("-n -u gpuaudit -- /bin/sh -c") for c in calls), calls
    fleet = load_fleet(only_run_dir(results))
    assert host_record(fleet, "asuser01")["probes"]["host"]["outcome"] == "ok"
    # as root on the controller, a local host without a become user needs no sudo at all
    if os.geteuid() == 0:
        assert len(calls) == 1, calls


def test_an_unsupported_become_method_is_a_usage_error(tmp_path: Path) -> None:
    env, log = _fake_sudo(tmp_path)
    inv = inventory(tmp_path / "inv.yml", {"su01": {"ansible_become": True, "ansible_become_method": "su"},
                                           "plain01": {}})
    results = tmp_path / "results"
    res = run_cli(["run", "-i", str(inv), "--probe", "host", "--results", str(results)], env=env)
    assert res.code == 2, (res.code, res.stderr)
    msg = res.one_line_error()
    assert "su01" in msg and "ansible_become_method 'su' is not supported" in msg, msg
    assert not log.exists()  # nothing ran
    assert not results.exists() or not any(p.is_dir() for p in results.iterdir())
    # without become the method does not matter (Ansible ignores it too)
    inv2 = inventory(tmp_path / "inv2.yml", {"su01": {"ansible_become_method": "su"}})
    again = run_cli(["run", "-i", str(inv2), "--probe", "host", "--results", str(results)], env=env)
    assert again.code in (0, 1), again.stderr
    assert json.loads((only_run_dir(results) / "run.json").read_text())["state"] == "complete"
