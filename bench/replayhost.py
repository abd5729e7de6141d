"""The replaying endpoint of the fan-out benchmark: sshd answers every login from recorded probe outputs.

With the real `host` probe a simulated host costs its sshd login and a python3 running the probe, about
59 ms of CPU on the benchmark machine, so 1,000 hosts kept the 2 cores busy and the latency table measured
the machine (bench/RESULTS.md, "Fan-out under latency").  Here the same sshd (real logins, real key
exchange, one address per host) runs bench/replayhost.c as every login's ForceCommand: a probe's
`python3 ... -` is answered with what the real python3 printed for the same script bytes, recorded by
the first login that sent them; Ansible's shell commands and sftp run for real (replayhost.c says how).

    replay = Replayer.prepare(work_dir)       # builds replayhost.c, makes the recordings folder
    cfg += replay.sshd_config()               # the ForceCommand line for the fleet's sshd_config
    replay.recordings()                       # what has been recorded so far
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from delayproxy import build

SOURCE = Path(__file__).resolve().parent / "replayhost.c"
PLACEHOLDER = "@@FP_SSH_CONNECTION@@"  # replayhost.c's PLACE: where a replay writes its login's $SSH_CONNECTION


@dataclass(frozen=True)
class Recording:
    """One recorded answer: the exit status and stdout of the real python3 for one script."""

    path: Path
    status: int
    stdout: str

    def envelopes(self) -> list[dict]:
        """The probe envelopes in its stdout (after the runner's start mark, if any)."""
        out = []
        for line in self.stdout.splitlines():
            line = line.strip()
            if line.startswith("{"):
                obj = json.loads(line)
                if isinstance(obj, dict) and "envelope_version" in obj:
                    out.append(obj)
        return out


FNV_OFFSET = 1469598103934665603
FNV_PRIME = 1099511628211


def recording_key(options: list[str], script: bytes) -> str:
    """replayhost.c's key of a recording: FNV-1a 64 over each interpreter option and its NUL, then the
    script bytes (the file name is `<key>.out`)."""
    h = FNV_OFFSET
    for chunk in [*(o.encode() + b"\0" for o in options), script]:
        for byte in chunk:
            h = ((h ^ byte) * FNV_PRIME) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def read_recording(path: Path) -> Recording:
    head, _, body = path.read_text().partition("\n")
    tag, _, status = head.partition(" ")
    if tag != "FPREPLAY" or not status.lstrip("-").isdigit():
        raise ValueError(f"{path}: not a replayhost recording (first line {head[:40]!r})")
    return Recording(path, int(status), body)


@dataclass(frozen=True)
class Replayer:
    exe: Path  # the compiled replayhost.c
    folder: Path  # recordings/ (written by the login user) and shim/python3 (a link to exe)

    @classmethod
    def prepare(cls, work: Path) -> Replayer:
        exe = build(source=SOURCE)
        folder = work / "replay"
        (folder / "recordings").mkdir(parents=True, exist_ok=True)
        (folder / "shim").mkdir(exist_ok=True)
        folder.chmod(0o755)
        # the login user (fpbench when the bench runs as root) records the first answers
        (folder / "recordings").chmod(0o1777)
        (folder / "shim").chmod(0o755)
        link = folder / "shim" / "python3"
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(exe)
        return cls(exe, folder)

    def sshd_config(self) -> str:
        """The lines that make every login of the fleet's sshd go through replayhost."""
        env = f"FP_REPLAY_DIR={self.folder / 'recordings'} FP_REPLAY_SHIM={self.folder / 'shim'}"
        return f"ForceCommand {env} exec {self.exe}\n"

    def recordings(self) -> list[Recording]:
        return [read_recording(p) for p in sorted((self.folder / "recordings").glob("*.out"))]

    def recording_for(self, options: list[str], script: bytes) -> Recording | None:
        """The recorded answer to `python3 OPTIONS -` fed `script`, if one was recorded."""
        path = self.folder / "recordings" / f"{recording_key(options, script)}.out"
        return read_recording(path) if path.is_file() else None

    def count(self) -> int:
        return sum(1 for _ in (self.folder / "recordings").glob("*.out"))


def replayed(recorded: dict, ssh_connection: str) -> dict:
    """The envelope a replay of `recorded` yields on the login whose $SSH_CONNECTION is `ssh_connection`."""
    text = json.dumps(recorded).replace(PLACEHOLDER, ssh_connection)
    return json.loads(text)


def uses_placeholder(env: dict) -> bool:
    return PLACEHOLDER in json.dumps(env)

