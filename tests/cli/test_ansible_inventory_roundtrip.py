"""`--ansible-inventory` keeps how to reach each host (issue 28, item 6): the inventory fleetprobe
writes is one the real `ansible` reaches the same hosts with, over SSH on another port with a key,
and over `ansible_connection: local`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.hostile import run_cli
from tests.support.hostile_strings import ansible_yaml
from tests.support.sshd import SshdServer

ANSIBLE = Path(sys.executable).parent / "ansible"


@pytest.mark.ssh
def test_the_written_inventory_pings_every_host_as_the_source_did(sshd: SshdServer, tmp_path: Path) -> None:
    if not ANSIBLE.is_file():
        pytest.fail(f"{ANSIBLE} missing: install the test extra (ansible-core)")
    src = tmp_path / "fleet.yml"
    py = json.dumps(sys.executable)
    src.write_text(
        "all:\n  vars:\n"
        f"    probe_known_hosts: {json.dumps(str(sshd.known_hosts))}\n"
        f"    ansible_python_interpreter: {py}\n"
        "  hosts:\n"
        "    ssh01:\n"
        f"      ansible_host: {sshd.addresses[-1]}\n"
        f"      ansible_port: {sshd.port}\n"
        f"      ansible_user: {json.dumps(sshd.user)}\n"
        f"      ansible_ssh_private_key_file: {json.dumps(str(sshd.keys.user_key))}\n"
        "    local01:\n"
        "      ansible_connection: local\n")
    out = tmp_path / "judged.yml"
    run = run_cli(["run", "-i", str(src), "--probe", "host", "--results", str(tmp_path / "runs"),
                   "--ssh-config", str(sshd.ssh_config), "--ansible-inventory", str(out)], timeout=120)
    assert run.code == 0, run.stdout + run.stderr
    doc = ansible_yaml(out.read_text())
    hv = doc["all"]["hosts"]
    assert hv["ssh01"]["ansible_port"] == sshd.port and hv["ssh01"]["ansible_host"] == sshd.addresses[-1]
    assert hv["ssh01"]["ansible_user"] == sshd.user
    assert hv["ssh01"]["ansible_ssh_private_key_file"] == str(sshd.keys.user_key)
    assert hv["local01"]["ansible_connection"] == "local" and "ansible_host" not in hv["local01"]
    health = hv["ssh01"]["fleetprobe_health"]
    assert f"health_{health}" in doc["all"]["children"] and "ssh01" in doc["all"]["children"][f"health_{health}"]["hosts"]
    env = {**os.environ, "ANSIBLE_HOME": str(tmp_path), "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
           "ANSIBLE_NOCOLOR": "1", "ANSIBLE_SSH_ARGS": f"-F {sshd.ssh_config} -o UserKnownHostsFile={sshd.known_hosts}"}
    ping = subprocess.run([str(ANSIBLE), "-i", str(out), "all", "-m", "ping", "-o"], capture_output=True,
                          text=True, timeout=180, env=env, cwd=tmp_path)
    assert ping.returncode == 0, ping.stdout + ping.stderr
    for host in ("ssh01", "local01"):
        assert f"{host} | SUCCESS" in ping.stdout and '"ping": "pong"' in ping.stdout, ping.stdout
