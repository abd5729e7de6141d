#!/usr/bin/env python3
"""One asyncssh server process for the whole simulated fleet, answering from bench/replayhost.c's recordings.

The other replaying endpoint of the fan-out benchmark (bench/replayhost.py has the first: sshd with a
ForceCommand).  A login here costs one asyncio task in one process instead of sshd's fork, privilege
separation and a session process; whichever costs the hosts less CPU per login is the one the table
uses (`--replay sshd|asyncssh`, both measured by the self-check).

    python3 bench/replayserver.py --port P --host-key KEY --authorized-keys AUTH --recordings DIR --shim DIR

- `python3 [options] -`: the script is read to its end and answered with the recording of the same
  options and bytes (the key replayhost.c computes), this login's $SSH_CONNECTION put in for the
  placeholder.  No recording: exit status 97 and a line on stderr saying to record through the sshd
  endpoint first (recordings come from the real probe in a real sshd login, never from here).
- Any other command runs in `/bin/sh -c` with the shim folder first on PATH (its python3 is
  replayhost.c), its stdin, stdout and stderr joined to the channel: Ansible's script module works.
- The sftp subsystem is asyncssh's own SFTP server on this machine's files (Ansible's file transfer).

Prints its port on the first stdout line once it listens.  Not part of the test suite's product code.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path

warnings.filterwarnings("ignore", category=DeprecationWarning)
warnings.filterwarnings("ignore", message=".*DSA.*")
warnings.filterwarnings("ignore", category=RuntimeWarning)  # asyncssh on 3.11: "Queue.join was never awaited"

import asyncssh  # noqa: E402  (bench-only dependency: sh bench/setup.sh installs it)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replayhost import PLACEHOLDER, recording_key  # noqa: E402

MISSING = 97
def probe_options(command: str) -> list[str] | None:
    """The options of a plain `python3 [options] -` (no shell syntax), or None for any other command."""
    if any(c in command for c in "'\"$;&|<>`\\(){}*?~\t\n"):
        return None
    words = command.split(" ")
    words = [w for w in words if w]
    if len(words) < 2 or os.path.basename(words[0]) != "python3" or words[-1] != "-":
        return None
    return words[1:-1]


class Recordings:
    """The recordings folder, each answer parsed once; keys memoized per script text (hashing 20 KB in
    Python costs more than a login)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.keys: dict[tuple[tuple[str, ...], bytes], str] = {}
        self.answers: dict[str, tuple[int, bytes]] = {}

    def answer(self, options: list[str], script: bytes) -> tuple[int, bytes] | None:
        k = (tuple(options), script)
        key = self.keys.get(k)
        if key is None:
            key = self.keys[k] = recording_key(options, script)
        got = self.answers.get(key)
        if got is None:
            try:
                head, _, body = (self.folder / f"{key}.out").read_bytes().partition(b"\n")
            except OSError:
                return None
            got = self.answers[key] = (int(head.split()[1]), body)
        return got


class Server(asyncssh.SSHServer):
    pass


def ssh_connection(process: asyncssh.SSHServerProcess) -> bytes:
    peer = process.get_extra_info("peername") or ("", 0)
    sock = process.get_extra_info("sockname") or ("", 0)
    return f"{peer[0]} {peer[1]} {sock[0]} {sock[1]}".encode()


async def replay(process: asyncssh.SSHServerProcess, recordings: Recordings, options: list[str]) -> None:
    script = await process.stdin.read()
    got = recordings.answer(options, script if isinstance(script, bytes) else script.encode())
    if got is None:
        process.stderr.write(b"replayserver: no recording for this script; record it through the sshd "
                             b"endpoint first (bench/replayhost.py)\n")
        process.exit(MISSING)
        return
    status, body = got
    process.stdout.write(body.replace(PLACEHOLDER.encode(), ssh_connection(process)))
    process.exit(status)


async def shell(process: asyncssh.SSHServerProcess, recordings: Recordings, shim: Path) -> None:
    # the shim's python3 is replayhost.c: it answers a script file from the same recordings folder
    env = dict(os.environ, PATH=f"{shim}:{os.environ.get('PATH', '/usr/bin:/bin')}",
               SSH_CONNECTION=ssh_connection(process).decode(), FP_REPLAY_DIR=str(recordings.folder))
    proc = await asyncio.create_subprocess_exec("/bin/sh", "-c", process.command or "exec /bin/sh", env=env,
                                                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)

    async def feed() -> None:  # a command that never reads its stdin must not wait for the client's EOF
        assert proc.stdin is not None
        while True:
            data = await process.stdin.read(65536)
            if not data:
                break
            proc.stdin.write(data)
            await proc.stdin.drain()
        proc.stdin.close()

    feeding = asyncio.ensure_future(feed())
    assert proc.stdout is not None and proc.stderr is not None
    # the whole output before the exit status (asyncssh's redirect() can send the status first)
    out, err = await asyncio.gather(proc.stdout.read(), proc.stderr.read())
    status = await proc.wait()
    feeding.cancel()
    process.stdout.write(out)
    process.stderr.write(err)
    process.exit(status)


def handler(recordings: Recordings, shim: Path) -> Callable[[asyncssh.SSHServerProcess], Awaitable[None]]:
    async def handle(process: asyncssh.SSHServerProcess) -> None:
        options = probe_options(process.command or "")
        if options is not None:
            await replay(process, recordings, options)
        else:
            await shell(process, recordings, shim)

    return handle


async def serve(a: argparse.Namespace) -> None:
    server = await asyncssh.create_server(
        Server, "0.0.0.0", a.port, server_host_keys=[a.host_key], authorized_client_keys=a.authorized_keys,
        process_factory=handler(Recordings(Path(a.recordings)), Path(a.shim)), encoding=None,
        sftp_factory=True, allow_scp=True, kex_algs=["curve25519-sha256", "curve25519-sha256@libssh.org"], backlog=4096,
        login_timeout=120)
    port = server.sockets[0].getsockname()[1]
    print(port, flush=True)
    await server.wait_closed()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--host-key", required=True)
    ap.add_argument("--authorized-keys", required=True)
    ap.add_argument("--recordings", required=True)
    ap.add_argument("--shim", required=True)
    a = ap.parse_args()
    try:
        asyncio.run(serve(a))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
