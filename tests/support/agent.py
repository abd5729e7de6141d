"""A real ssh-agent for tests, on a private socket, holding the keys a test adds."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path


def agent_missing_reason() -> str | None:
    if not (shutil.which("ssh-agent") and shutil.which("ssh-add")):
        return "ssh-agent/ssh-add are not installed; apt-get install openssh-client"
    return None


@contextlib.contextmanager
def ssh_agent() -> Iterator[str]:
    """Start `ssh-agent -D -a SOCK`; yields the socket path (for SSH_AUTH_SOCK)."""
    # unix socket paths are limited to ~100 bytes: pytest's tmp_path can be longer
    home = tempfile.mkdtemp(prefix="fp-agent-")
    sock = os.path.join(home, "agent.sock")
    proc = subprocess.Popen(
        ["ssh-agent", "-D", "-a", sock],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 5
        while not os.path.exists(sock):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("ssh-agent did not start")
            time.sleep(0.02)
        yield sock
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(home, ignore_errors=True)


def agent_add(sock: str, key: Path, passphrase: str | None = None) -> None:
    """`ssh-add KEY`, answering a passphrase through SSH_ASKPASS (never a terminal)."""
    env = dict(os.environ, SSH_AUTH_SOCK=sock)
    with tempfile.TemporaryDirectory(prefix="fp-askpass-") as tmp:
        if passphrase is not None:
            askpass = Path(tmp) / "askpass"
            askpass.write_text(f"#!/bin/sh\nprintf '%s\\n' '{passphrase}'\n")
            askpass.chmod(0o700)
            env.update(
                SSH_ASKPASS=str(askpass), SSH_ASKPASS_REQUIRE="force", DISPLAY=env.get("DISPLAY", ":0")
            )
        subprocess.run(
            ["ssh-add", str(key)],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=True,
            timeout=20,
        )
