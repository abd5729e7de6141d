"""Secrets given to the tool never reach a run file, the terminal or an error message.

fleetprobe logs in with keys (or an agent) only, so passwords in an Ansible inventory are carried
but never used; they must still not leak.  Each case greps every byte the run wrote and
everything the CLI printed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.hostile import (
    assert_good_host,
    host_record,
    inventory,
    load_fleet,
    only_run_dir,
    run_cli,
)
from tests.support.sshd import KEY_PASSPHRASE, SshdServer

SECRETS = {
    "ansible_password": "pw-Zebra-7741",
    "ansible_ssh_pass": "sshpw-Quokka-1130",
    "ansible_become_password": "become-Narwhal-5512",
    "ansible_become_pass": "become-Ibis-0097",
    "ansible_ssh_private_key_passphrase": "phrase-Okapi-8820",
    "vault_api_token": "tok-Lemur-3141",
}


def _everything_written(*roots: Path) -> bytes:
    blob = b""
    for root in roots:
        if root.is_file():
            blob += root.read_bytes()
            continue
        for p in root.rglob("*"):
            if p.is_file():
                blob += p.name.encode() + b"\n" + p.read_bytes()
    return blob


def _assert_no_secret(blob: bytes, secrets: list[str]) -> None:
    for s in secrets:
        assert s.encode() not in blob, f"secret {s!r} leaked"


def test_inventory_passwords_never_reach_run_files_or_output(tmp_path: Path) -> None:
    expect = {"gpu_count": 0, "nvlink_links_per_gpu": 12}
    hosts = {"good01": {**SECRETS, "probe_expect": expect}, "good02": {}}
    inv = inventory(tmp_path / "inventory.yml", hosts)
    results = tmp_path / "results"
    html, prom, junit = tmp_path / "r.html", tmp_path / "r.prom", tmp_path / "r.xml"
    outputs = []
    for fmt in ("table", "json"):  # yaml/csv render the same host records as json
        res = run_cli(["run", "-i", str(inv), "--probe", "host", "--results", str(results), "--format", fmt,
                       "--html", str(html), "--prometheus", str(prom), "--junit", str(junit)])
        assert "Traceback" not in res.stderr, res.stderr
        outputs.append(res)
    run_dir = sorted(p for p in results.iterdir() if p.is_dir())[-1]
    fleet = load_fleet(run_dir)
    assert_good_host(fleet, "good01")
    assert_good_host(fleet, "good02")
    # the redaction is by key and does not touch what judging needs: probe_expect is kept as given
    stored = json.loads((run_dir / "raw" / "good01" / "_host.json").read_text())["vars"]
    assert stored["probe_expect"] == expect
    assert all(stored[k] == "<redacted>" for k in SECRETS)
    later = run_cli(["show", "--results", str(results)])
    rejudged = run_cli(["rejudge", run_dir.name, "--results", str(results)])
    assert rejudged.code in (0, 1), rejudged.stderr
    blob = _everything_written(results, html, prom, junit)
    blob += b"".join((r.stdout + r.stderr).encode() for r in [*outputs, later, rejudged])
    _assert_no_secret(blob, list(SECRETS.values()))
    assert b"phrase-Okapi" not in blob


def test_become_password_is_not_used_or_shown_when_sudo_fails(tmp_path: Path) -> None:
    # sudo -n never reads a password: the become password is neither sent nor printed
    inv = inventory(tmp_path / "inventory.yml", {"sudo01": {"ansible_become_password": SECRETS[
        "ansible_become_password"], "ansible_become": True}, "good01": {}})
    results = tmp_path / "results"
    res = run_cli(["run", "-i", str(inv), "--probe", "host", "--results", str(results)])
    assert "Traceback" not in res.stderr
    fleet = load_fleet(only_run_dir(results))
    assert host_record(fleet, "sudo01")["outcome"] in ("ok", "failed")  # ok where we are root already
    _assert_no_secret(_everything_written(results) + (res.stdout + res.stderr).encode(),
                      [SECRETS["ansible_become_password"]])


@pytest.mark.usefixtures("no_agent")
def test_key_passphrase_in_an_error_path_is_never_printed(tmp_path: Path, sshd: SshdServer) -> None:
    locked: dict[str, Any] = {**sshd.host("x").vars, "ansible_connection": "ssh",
                              "ansible_ssh_private_key_file": str(sshd.keys.passphrase_key),
                              "ansible_ssh_private_key_passphrase": KEY_PASSPHRASE,
                              "ansible_ssh_pass": SECRETS["ansible_ssh_pass"]}
    good: dict[str, Any] = {**sshd.host("x").vars, "ansible_connection": "ssh"}
    inv = inventory(tmp_path / "inventory.yml", {"locked01": locked, "good01": good})
    results = tmp_path / "results"
    res = run_cli(["run", "-i", str(inv), "--probe", "host", "--results", str(results), "--retries", "0",
                   "--ssh-config", str(sshd.ssh_config), "--known-hosts", str(sshd.known_hosts)])
    fleet = load_fleet(only_run_dir(results))
    rec = host_record(fleet, "locked01")
    assert rec["outcome"] == "unreachable"
    assert "is protected by a passphrase and no ssh-agent offers it" in rec["reason"]
    assert_good_host(fleet, "good01")
    _assert_no_secret(_everything_written(results) + (res.stdout + res.stderr).encode(),
                      [KEY_PASSPHRASE, SECRETS["ansible_ssh_pass"]])


@pytest.mark.parametrize("case", ["conflict", "bad_yaml", "bad_type"])
def test_secrets_stay_out_of_inventory_error_messages(tmp_path: Path, case: str) -> None:
    secret, other = SECRETS["ansible_password"], SECRETS["ansible_ssh_pass"]
    inv = tmp_path / "inventory.yml"
    if case == "conflict":  # one host given two different passwords in one file
        inv.write_text(f"all:\n  children:\n    a:\n      hosts:\n        h1:\n          ansible_password: {secret}\n"
                       f"    b:\n      hosts:\n        h1:\n          ansible_password: {other}\n")
    elif case == "bad_yaml":  # a syntax error on the line that holds the password
        inv.write_text(f"all:\n  hosts:\n    h1:\n      ansible_password: \"{secret}\n      x: [\n")
    else:
        inv.write_text(f"all:\n  hosts:\n    h1: [\"{secret}\", \"{other}\"]\n")
    res = run_cli(["run", "-i", str(inv), "--probe", "host", "--results", str(tmp_path / "results")])
    assert res.code == 2, res.stderr
    msg = res.one_line_error()
    assert msg.startswith("probe: error: ") and str(inv) in msg
    _assert_no_secret((res.stdout + res.stderr).encode(), [secret, other])
