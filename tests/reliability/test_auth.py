"""Authentication, host keys and privilege against a real sshd: refused clearly, never prompting."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from orchestrator.transport import SshTransport, TransportError, become_failure, wrap_command
from tests.support.agent import agent_add, agent_missing_reason, ssh_agent
from tests.support.sshd import KEY_PASSPHRASE, ROOT_DIR, SshdServer, known_hosts_line

pytestmark = pytest.mark.ssh


def _error(sshd: SshdServer, host_vars: dict[str, object] | None = None, **opts: object) -> TransportError:
    with pytest.raises(TransportError) as err:
        SshTransport(sshd.host(**(host_vars or {})), sshd.options(**opts)).run("true", b"", 10)
    assert "\n" not in err.value.message
    return err.value


# -- keys ----------------------------------------------------------------------------------------


def test_wrong_key_is_an_auth_error_naming_user_and_key(sshd: SshdServer, no_agent: None) -> None:
    err = _error(sshd, {"ansible_ssh_private_key_file": str(sshd.keys.wrong_key)})
    assert err.kind == "auth"
    assert repr(sshd.user) in err.message and str(sshd.keys.wrong_key) in err.message
    assert f"127.0.0.1:{sshd.port}" in err.message
    assert err.retried == 0  # auth failures are never retried


def test_missing_key_file_is_an_auth_error_naming_the_file(sshd: SshdServer, tmp_path: Path) -> None:
    missing = tmp_path / "id_gone"
    err = _error(sshd, {"ansible_ssh_private_key_file": str(missing)})
    assert err.kind == "auth" and f"{missing} does not exist" in err.message
    assert "ansible_ssh_private_key_file" in err.message


def test_no_key_and_no_agent_is_an_auth_error(
    sshd: SshdServer, no_agent: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh/id_* to fall back on
    host = sshd.host()
    del host.vars["ansible_ssh_private_key_file"]
    with pytest.raises(TransportError) as err:
        SshTransport(host, sshd.options()).run("true", b"", 10)
    assert err.value.kind == "auth" and "authentication failed" in err.value.message


def test_passphrase_key_without_agent_fails_at_once_without_prompting(
    sshd: SshdServer, tmp_path: Path
) -> None:
    # in a child with stdin closed, no terminal and no agent: a prompt would hang or crash it
    script = tmp_path / "connect.py"
    script.write_text(
        "import json, sys\n"
        f"sys.path.insert(0, {str(ROOT_DIR)!r})\n"
        "from orchestrator.inventory.model import Host\n"
        "from orchestrator.transport import SshTransport, TransportOptions, TransportError\n"
        f"host = Host('locked01', vars={json.dumps(sshd.host().vars | {'ansible_ssh_private_key_file': str(sshd.keys.passphrase_key)})})\n"
        f"opts = TransportOptions(known_hosts={str(sshd.known_hosts)!r}, ssh_config={str(sshd.ssh_config)!r}, connect_timeout=5)\n"
        "try:\n"
        "    SshTransport(host, opts).run('true', b'', 10)\n"
        "    print(json.dumps({'kind': 'none'}))\n"
        "except TransportError as e:\n"
        "    print(json.dumps({'kind': e.kind, 'message': e.message}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(script)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=env,
        timeout=60,
        start_new_session=True,  # no controlling terminal to prompt on
    )
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr.decode()
    out = json.loads(proc.stdout)
    assert out["kind"] == "auth"
    assert "passphrase" in out["message"] and f"ssh-add {sshd.keys.passphrase_key}" in out["message"]
    assert elapsed < 30, elapsed
    assert b"Traceback" not in proc.stderr


def test_agent_is_used_when_the_inventory_names_no_key(
    sshd: SshdServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if agent_missing_reason():
        pytest.skip(agent_missing_reason())
    monkeypatch.setenv("HOME", str(tmp_path))  # the agent is the only source of keys
    host = sshd.host()
    del host.vars["ansible_ssh_private_key_file"]
    with ssh_agent() as sock:
        agent_add(sock, sshd.keys.user_key)
        monkeypatch.setenv("SSH_AUTH_SOCK", sock)
        with SshTransport(host, sshd.options()) as t:
            assert t.run("true", b"", 10).exit_code == 0


def test_passphrase_key_named_in_inventory_works_once_the_agent_holds_it(
    sshd: SshdServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # what the passphrase error tells the user to do must actually fix it
    if agent_missing_reason():
        pytest.skip(agent_missing_reason())
    host = sshd.host(ansible_ssh_private_key_file=str(sshd.keys.passphrase_key))
    with ssh_agent() as sock:
        agent_add(sock, sshd.keys.wrong_key)  # other keys in the agent are not offered
        agent_add(sock, sshd.keys.passphrase_key, KEY_PASSPHRASE)
        monkeypatch.setenv("SSH_AUTH_SOCK", sock)
        with SshTransport(host, sshd.options()) as t:
            assert t.run("true", b"", 10).exit_code == 0


def test_inventory_key_does_not_fall_back_to_other_agent_keys(
    sshd: SshdServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    if agent_missing_reason():
        pytest.skip(agent_missing_reason())
    host = sshd.host(ansible_ssh_private_key_file=str(sshd.keys.wrong_key))
    with ssh_agent() as sock:
        agent_add(sock, sshd.keys.user_key)  # would work, but the inventory asked for wrong_key only
        monkeypatch.setenv("SSH_AUTH_SOCK", sock)
        with pytest.raises(TransportError) as err:
            SshTransport(host, sshd.options()).run("true", b"", 10)
    assert err.value.kind == "auth"


# -- host keys -----------------------------------------------------------------------------------


def test_unknown_host_under_strict_is_refused_with_the_command_to_fix_it(
    sshd: SshdServer, tmp_path: Path
) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    err = _error(sshd, {"ansible_host": "127.0.0.1"}, known_hosts=str(kh))
    assert err.kind == "hostkey"
    assert f"ssh-keyscan -p {sshd.port} 127.0.0.1 >> {kh}" in err.message
    assert "--host-key-policy accept-new" in err.message
    assert kh.read_text() == ""  # strict records nothing


def test_changed_host_key_under_strict_is_refused_and_says_how_to_fix(
    sshd: SshdServer, tmp_path: Path
) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text(known_hosts_line("127.0.0.1", sshd.port, sshd.keys.public(sshd.keys.other_host_key)))
    before = kh.read_text()
    err = _error(sshd, known_hosts=str(kh))
    assert err.kind == "hostkey"
    assert "HOST KEY CHANGED" in err.message
    assert f"ssh-keygen -R '[127.0.0.1]:{sshd.port}' -f {kh}" in err.message
    assert err.retried == 0
    assert kh.read_text() == before


def test_changed_host_key_is_refused_under_accept_new_too(sshd: SshdServer, tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text(known_hosts_line("127.0.0.1", sshd.port, sshd.keys.public(sshd.keys.other_host_key)))
    err = _error(sshd, known_hosts=str(kh), host_key_policy="accept-new")
    assert err.kind == "hostkey" and "HOST KEY CHANGED" in err.message


def test_unknown_hosts_under_accept_new_are_accepted_and_recorded(sshd: SshdServer, tmp_path: Path) -> None:
    kh = tmp_path / "sub" / "known_hosts"  # the directory is created like ssh does
    hosts = sshd.fleet(2 * len(sshd.addresses))  # two inventory hosts per address
    opts = sshd.options(known_hosts=str(kh), host_key_policy="accept-new")

    def one(host: object) -> int | None:
        with SshTransport(host, opts) as t:  # type: ignore[arg-type]
            return t.run("true", b"", 10).exit_code

    with ThreadPoolExecutor(max_workers=8) as pool:
        assert list(pool.map(one, hosts)) == [0] * len(hosts)
    lines = kh.read_text().splitlines()
    expected = {
        known_hosts_line(a, sshd.port, sshd.keys.public(sshd.keys.host_key)).strip() for a in sshd.addresses
    }
    assert set(lines) == expected and len(lines) == len(expected)  # one intact line per address
    # what was recorded now satisfies strict
    with SshTransport(sshd.host(), sshd.options(known_hosts=str(kh))) as t:
        assert t.run("true", b"", 10).exit_code == 0


def test_policy_off_accepts_a_changed_key_and_records_nothing(sshd: SshdServer, tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text(known_hosts_line("127.0.0.1", sshd.port, sshd.keys.public(sshd.keys.other_host_key)))
    before = kh.read_text()
    with SshTransport(sshd.host(), sshd.options(known_hosts=str(kh), host_key_policy="off")) as t:
        assert t.run("true", b"", 10).exit_code == 0
    assert kh.read_text() == before


def test_inventory_variable_sets_the_policy_per_host(sshd: SshdServer, tmp_path: Path) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    host = sshd.host(probe_host_key_policy="accept-new")
    with SshTransport(host, sshd.options(known_hosts=str(kh), host_key_policy="strict")) as t:
        assert t.run("true", b"", 10).exit_code == 0
    assert f"[127.0.0.1]:{sshd.port} ssh-ed25519" in kh.read_text()
    bad = sshd.host(probe_host_key_policy="yolo")
    with pytest.raises(TransportError) as err:
        SshTransport(bad, sshd.options())
    assert err.value.kind == "config" and "yolo" in err.value.message


def test_hashed_known_hosts_entries_satisfy_strict(sshd: SshdServer, tmp_path: Path) -> None:
    keygen = shutil.which("ssh-keygen")
    assert keygen is not None
    kh = tmp_path / "known_hosts"
    shutil.copy(sshd.known_hosts, kh)
    subprocess.run([keygen, "-H", "-f", str(kh)], check=True, capture_output=True)
    assert "|1|" in kh.read_text() and "127.0.0.1" not in kh.read_text()
    with SshTransport(sshd.host(), sshd.options(known_hosts=str(kh))) as t:
        assert t.run("true", b"", 10).exit_code == 0


# -- become --------------------------------------------------------------------------------------

FAKE_SUDO_PASSWORD = """#!/bin/sh
# stands in for sudo on a host where this user needs a password
if [ "$1" != "-n" ]; then
  echo "[sudo] password for $(id -un): " >&2
  sleep 30  # what a real prompt would do to an unattended run
fi
echo "sudo: a password is required" >&2
exit 1
"""


def test_become_where_sudo_wants_a_password_fails_fast_with_a_message(
    sshd: SshdServer, tmp_path: Path
) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "sudo").write_text(FAKE_SUDO_PASSWORD)
    (bindir / "sudo").chmod(0o755)
    command = f"PATH={bindir}:$PATH; export PATH; " + wrap_command("python3 -", True)
    with SshTransport(sshd.host(), sshd.options()) as t:
        start = time.monotonic()
        r = t.run(command, b"print('never runs')\n", timeout=20)
        elapsed = time.monotonic() - start
    assert r.exit_code == 1 and not r.timed_out
    assert elapsed < 10, elapsed
    reason = become_failure(r.exit_code, r.stderr)
    assert reason is not None and "password" in reason and "NOPASSWD" in reason
