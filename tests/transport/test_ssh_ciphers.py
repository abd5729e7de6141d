"""The cipher order SshTransport offers (issue 51 item 4): AES-GCM first, the same set as Paramiko's.

Real OpenSSH sshd on loopback: what is agreed with a server that has GCM, with servers that allow
only other ciphers (each still connects, as before), and that the offered set never grows or shrinks.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

import paramiko
import pytest

from orchestrator.transport import SshTransport
from orchestrator.transport.ssh import prefer_aead
from tests.support.sshd import SshdServer

pytestmark = pytest.mark.ssh


def _agreed(server: SshdServer) -> tuple[str, str, bytes]:
    with SshTransport(server.host(), server.options()) as t:
        r = t.run("echo ok", b"", 20)
        assert t._conn is not None
        tr = t._conn.client.get_transport()
        return str(tr.local_cipher), str(tr.remote_cipher), r.stdout


def test_gcm_is_agreed_with_an_openssh_server_that_offers_it(sshd: SshdServer) -> None:
    # before the change Paramiko's first choice, aes128-ctr with an HMAC per packet, was agreed
    local, remote, out = _agreed(sshd)
    assert out == b"ok\n"
    assert local == remote == "aes128-gcm@openssh.com"


@pytest.mark.parametrize("ciphers", ["aes128-ctr", "aes256-ctr", "aes256-gcm@openssh.com", "aes128-cbc"])
def test_a_server_with_other_ciphers_still_agrees_on_one_it_allows(
        sshd_factory: Callable[..., SshdServer], ciphers: str) -> None:
    server = sshd_factory({"Ciphers": ciphers})
    local, remote, out = _agreed(server)
    assert out == b"ok\n"
    assert local == remote == ciphers


@pytest.mark.parametrize("disabled", [
    {},
    {"ciphers": ["aes128-gcm@openssh.com"]},
    {"ciphers": ["aes128-gcm@openssh.com", "aes256-gcm@openssh.com"]},
    {"ciphers": ["aes128-ctr", "3des-cbc"]},
])
def test_the_offered_set_is_paramikos_reordered_never_widened(disabled: dict[str, list[str]]) -> None:
    a, b = socket.socketpair()
    t = paramiko.Transport(a, disabled_algorithms=disabled)  # never started: only its options are read
    try:
        before = tuple(t.preferred_ciphers)  # what the client offers: disabled_algorithms filtered out
        prefer_aead(t)
        after = tuple(t.preferred_ciphers)
    finally:
        t.close()
        b.close()
    assert sorted(after) == sorted(before)  # nothing added, nothing dropped
    assert not set(after) & set(disabled.get("ciphers", []))  # what was disabled stays out
    gcm = [c for c in before if c.endswith("-gcm@openssh.com")]
    assert list(after[:len(gcm)]) == gcm
    assert [c for c in after if c not in gcm] == [c for c in before if c not in gcm]
