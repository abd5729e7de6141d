"""Filesystem safety against planted files: the results-directory lock, links under the run
directory, known_hosts read and appended like OpenSSH does, and an inventory that names a
known_hosts path of its choosing."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from orchestrator.transport import SshTransport, TransportError
from tests.support.hostile import host_record, inventory, load_fleet, only_run_dir, run_cli
from tests.support.sshd import SshdServer, known_hosts_line


def _inv(tmp_path: Path) -> Path:
    return inventory(tmp_path / "inv.yml", {"good01": {}})


def test_a_lock_file_planted_as_a_link_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (results / ".fleetprobe.lock").symlink_to(victim)
    res = run_cli(["run", "-i", str(_inv(tmp_path)), "--probe", "host", "--results", str(results)])
    assert res.code == 2, (res.code, res.stderr)
    assert "is a symbolic link" in res.one_line_error()
    assert victim.read_text() == "precious\n"


def test_a_foreign_file_at_the_lock_path_is_not_truncated(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    other = results / ".fleetprobe.lock"
    other.write_text("somebody else's data, not a lock\n")
    os.link(other, tmp_path / "second-name")  # a hard link to a file elsewhere
    res = run_cli(["run", "-i", str(_inv(tmp_path)), "--probe", "host", "--results", str(results)])
    assert res.code == 2 and "does not truncate a file it did not write" in res.one_line_error(), res.stderr
    assert other.read_text() == "somebody else's data, not a lock\n"
    # the lock fleetprobe writes itself is reused run after run
    fresh = tmp_path / "fresh"
    for _ in range(2):
        ok = run_cli(["run", "-i", str(_inv(tmp_path)), "--probe", "host", "--results", str(fresh)])
        assert ok.code == 0, ok.stderr


def test_output_dir_with_a_planted_raw_link_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / "raw").symlink_to(elsewhere)
    res = run_cli(["run", "-i", str(_inv(tmp_path)), "--probe", "host", "-o", str(out),
                   "--results", str(tmp_path / "results")])
    assert res.code == 2, (res.code, res.stderr)
    assert "raw is a symbolic link" in res.one_line_error()
    assert list(elsewhere.iterdir()) == []


def test_run_files_are_private_to_their_owner(tmp_path: Path) -> None:
    results = tmp_path / "results"
    res = run_cli(["run", "-i", str(_inv(tmp_path)), "--probe", "host", "--results", str(results)])
    assert res.code == 0, res.stderr
    run_dir = only_run_dir(results)
    for p in [run_dir, *run_dir.rglob("*")]:
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode & 0o077 == 0, (p, oct(mode))
    assert host_record(load_fleet(run_dir), "good01")["outcome"] == "ok"


def test_a_planted_link_in_a_stored_run_is_not_copied_by_rejudge(tmp_path: Path) -> None:
    results = tmp_path / "results"
    assert run_cli(["run", "-i", str(_inv(tmp_path)), "--probe", "host", "--results", str(results)]).code == 0
    run_dir = only_run_dir(results)
    secret = tmp_path / "secret.txt"
    secret.write_text("do not copy me")
    (run_dir / "raw" / "good01" / "loot.json").symlink_to(secret)
    res = run_cli(["rejudge", run_dir.name, "--results", str(results)])
    assert res.code == 0, res.stderr
    newest = sorted(p for p in results.iterdir() if p.is_dir())[-1]
    assert newest != run_dir and not (newest / "raw" / "good01" / "loot.json").exists()
    assert b"do not copy me" not in b"".join(p.read_bytes() for p in newest.rglob("*") if p.is_file())


# -- known_hosts ---------------------------------------------------------------------------------


@pytest.mark.ssh
def test_a_malformed_known_hosts_line_is_skipped_with_a_warning_as_ssh_does(
    sshd: SshdServer, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    kh = tmp_path / "known_hosts"
    good = sshd.known_hosts.read_text()
    kh.write_text("garbage line without a key\n[127.0.0.1]:1 ssh-ed25519 !!!notbase64!!!\n" + good)
    with SshTransport(sshd.host(), sshd.options(known_hosts=str(kh))) as t:
        r = t.run("echo ok", b"", 10)
    assert r.exit_code == 0 and r.stdout == b"ok\n"
    err = capfd.readouterr().err
    assert f"{kh}:1: skipped" in err and f"{kh}:2: skipped" in err, err


@pytest.mark.ssh
def test_accept_new_appends_after_a_last_line_without_newline_atomically_keeping_permissions(
    sshd: SshdServer, tmp_path: Path
) -> None:
    kh = tmp_path / "known_hosts"
    other = known_hosts_line("10.9.9.9", 22, sshd.keys.public(sshd.keys.other_host_key)).rstrip("\n")
    kh.write_text(other)  # no trailing newline, as an editor may leave it
    kh.chmod(0o640)
    inode = kh.stat().st_ino
    with SshTransport(sshd.host(), sshd.options(known_hosts=str(kh), host_key_policy="accept-new")) as t:
        assert t.run("true", b"", 10).exit_code == 0
    lines = kh.read_text().splitlines()
    assert lines[0] == other and len(lines) == 2 and f":{sshd.port}" in lines[1], lines
    assert kh.read_text().endswith("\n")
    assert stat.S_IMODE(kh.stat().st_mode) == 0o640
    assert kh.stat().st_ino != inode  # replaced by rename, never written in place
    # and it is read back: the next connection under strict succeeds
    with SshTransport(sshd.host(), sshd.options(known_hosts=str(kh))) as t:
        assert t.run("true", b"", 10).exit_code == 0


@pytest.mark.ssh
def test_an_inventory_known_hosts_path_outside_ssh_is_never_appended_to(sshd: SshdServer, tmp_path: Path) -> None:
    target = tmp_path / "cron.d-job"
    target.write_text("* * * * * root true\n")
    host = sshd.host(probe_known_hosts=str(target))
    with pytest.raises(TransportError) as err:
        SshTransport(host, sshd.options(known_hosts=None, host_key_policy="accept-new")).run("true", b"", 10)
    assert err.value.kind == "hostkey"
    assert target.read_text() == "* * * * * root true\n"
    assert json.dumps(err.value.message)  # one line, no traceback
