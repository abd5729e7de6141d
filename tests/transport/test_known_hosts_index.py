"""known_hosts lookups at fleet size (issue 51 item 4): the same answers as Paramiko's scan, without
comparing the name with every entry on every connection."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from pathlib import Path

import pytest
from paramiko import HostKeys
from paramiko.ed25519key import Ed25519Key

from orchestrator.transport import hostkeys
from orchestrator.transport.hostkeys import load_known_hosts, parse_known_hosts

# two real ed25519 public keys (ssh-keygen -t ed25519), a third for "another key"
KEYS = [
    "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",
    "AAAAC3NzaC1lZDI1NTE5AAAAILdKJWs7sOdJtEq0VoXU+QH0PpS7XYOuBEeHrbgYm2pm",
]


def _hashed(name: str, salt: bytes) -> str:
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def _lines() -> list[str]:
    """A known_hosts file with the shapes ssh writes: plain, [host]:port, several names on a line,
    hashed names, the same host twice (two key lines), comments, a line that does not parse."""
    lines = [f"10.0.{i // 200}.{i % 200} ssh-ed25519 {KEYS[i % 2]}" for i in range(600)]
    lines += [
        f"[10.9.0.1]:2222 ssh-ed25519 {KEYS[0]}",
        f"gpu-a,gpu-b,10.9.0.2 ssh-ed25519 {KEYS[1]}",
        f"{_hashed('hashed-host', b'0123456789abcdefghij')} ssh-ed25519 {KEYS[0]}",
        f"{_hashed('[hashed-port]:2200', b'abcdefghij0123456789')} ssh-ed25519 {KEYS[1]}",
        f"gpu-a,{_hashed('gpu-c', b'zyxwvutsrqponmlkjihg')} ssh-ed25519 {KEYS[1]}",
        f"10.0.0.7 ssh-ed25519 {KEYS[0]}",  # a second line for a host listed above
        "# a comment",
        "not a known_hosts line",
    ]
    return lines


NAMES = ["10.0.0.0", "10.0.2.199", "10.0.0.7", "[10.9.0.1]:2222", "10.9.0.1", "gpu-a", "gpu-b", "gpu-c",
         "10.9.0.2", "hashed-host", "[hashed-port]:2200", "hashed-port", "unknown", "", "10.0.0.70",
         _hashed("hashed-host", b"0123456789abcdefghij")]


def _as_dict(found: object) -> dict[str, str] | None:
    if found is None:
        return None
    return {kind: key.get_base64() for kind, key in found.items()}  # type: ignore[attr-defined]


def _paramikos(lines: list[str]) -> HostKeys:
    plain = HostKeys()
    plain._entries = list(parse_known_hosts("kh", lines)._entries)  # type: ignore[attr-defined]
    return plain


@pytest.mark.parametrize("name", NAMES)
def test_every_kind_of_name_gets_paramikos_answer(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    lines = _lines()
    ours = parse_known_hosts("kh", lines)
    assert _as_dict(ours.lookup(name)) == _as_dict(_paramikos(lines).lookup(name))


def test_keys_added_after_parsing_are_found_and_answers_stay_paramikos(capsys: pytest.CaptureFixture[str]) -> None:
    lines = _lines()
    ours, theirs = parse_known_hosts("kh", lines), _paramikos(lines)
    assert ours.lookup("10.0.0.3") is not None  # the index exists before the additions
    new = Ed25519Key(data=base64.b64decode(KEYS[0]))
    for keys in (ours, theirs):
        keys.add("new-host", "ssh-ed25519", new)  # accept-new's path
        keys.add("10.0.0.3", "ssh-ed25519", new)  # replaces that host's key in place
    for name in ["new-host", "10.0.0.3", "10.0.0.4"]:
        assert _as_dict(ours.lookup(name)) == _as_dict(theirs.lookup(name)), name
    found = ours.lookup("new-host")
    found["ssh-rsa-fake"] = new  # a key set through the answer lands in the shared object, as in Paramiko
    assert len(ours._entries) == len(theirs._entries) + 1  # type: ignore[attr-defined]


def test_a_lookup_compares_the_name_with_hashed_entries_only(capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    # before: every connection compared its name with all 606 entries
    path = tmp_path / "known_hosts"
    path.write_text("\n".join(_lines()) + "\n")
    keys = load_known_hosts([str(path)])
    calls = []
    real = HostKeys._hostname_matches

    def counted(self: HostKeys, hostname: str, entry: object) -> bool:
        calls.append(hostname)
        return real(self, hostname, entry)  # type: ignore[arg-type]

    monkeypatch.setattr(HostKeys, "_hostname_matches", counted)
    for name in ["10.0.1.5", "10.0.2.100", "unknown", "[10.9.0.1]:2222"]:
        calls.clear()
        keys.lookup(name)
        hashed = 3  # hashed-host, [hashed-port]:2200, gpu-c's line
        assert len(calls) <= hashed + 2, (name, len(calls))  # + the few entries that match


def test_several_files_are_merged_once_and_a_change_is_seen(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    user, system = tmp_path / "known_hosts", tmp_path / "ssh_known_hosts"
    user.write_text(f"10.0.0.1 ssh-ed25519 {KEYS[0]}\n")
    system.write_text(f"10.0.0.2 ssh-ed25519 {KEYS[1]}\n")
    paths = [str(user), str(system)]
    first = load_known_hosts(paths)
    assert load_known_hosts(paths) is first  # not a copy of every entry per connection
    assert first.lookup("10.0.0.1") is not None and first.lookup("10.0.0.2") is not None
    hostkeys.append_known_host(str(user), "10.0.0.3", Ed25519Key(data=base64.b64decode(KEYS[1])))
    again = load_known_hosts(paths)
    assert again.lookup("10.0.0.3") is not None  # accept-new's addition is seen by later connections
    os.utime(system, ns=(1, 1))  # the file changed under us (same size): parsed again
    system.write_text(f"10.0.0.4 ssh-ed25519 {KEYS[1]}\n")
    third = load_known_hosts(paths)
    assert third.lookup("10.0.0.4") is not None and third.lookup("10.0.0.2") is None
