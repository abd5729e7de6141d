"""Build and run bench/delayproxy.c: the user-space delay the latency tables put before the fleet's sshd.

The kernel of the benchmark machine has no netem qdisc (`tc qdisc add ... netem` fails), so the
round-trip time is added by a small C proxy (one epoll loop, no threads): every byte takes RTT/2
each way, a new connection reaches sshd one RTT after it was accepted, an end of stream travels
like data.  Compiled once per source text with gcc -O2 (like orchestrator/simulate/cbuild.py does
for the fake libraries) into a cache folder.

    proxy = DelayProxy.start(upstream_port=sshd_port, rtt_ms=100)
    ... connect to 127.0.x.y:proxy.port: it reaches 127.0.x.y:sshd_port 50 ms later per direction ...
    proxy.cpu_s()          # the proxy's own CPU so far (utime + stime), apart from tools and hosts
    proxy.stop()           # its summary line: connections, bytes each way
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "delayproxy.c"
CLK_TCK = os.sysconf("SC_CLK_TCK")


class BuildError(RuntimeError):
    pass


def build(cache: Path | None = None, source: Path = SOURCE) -> Path:
    """The compiled `source` (default the proxy), built with gcc -O2 once per source text (cached by its
    hash); bench/replayhost.py builds the replaying host's program with it too."""
    text = source.read_bytes()
    key = hashlib.sha256(text).hexdigest()[:16]
    name = source.stem
    cache = cache or Path(os.environ.get("TMPDIR", tempfile.gettempdir())) / f"fleetprobe-{name}-{os.getuid()}"
    exe = cache / key / name
    if exe.is_file():
        return exe
    gcc = shutil.which("gcc") or shutil.which("cc")
    if not gcc:
        raise BuildError(f"building bench/{source.name} needs gcc (apt-get install gcc)")
    tmp = cache / f".{key}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    proc = subprocess.run([gcc, "-O2", "-Wall", "-Wextra", "-o", str(tmp / name), str(source)],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise BuildError(f"gcc failed for bench/{source.name}:\n{proc.stderr[-3000:]}")
    try:
        tmp.rename(exe.parent)
    except OSError:  # a concurrent build won the race; its result is identical
        shutil.rmtree(tmp, ignore_errors=True)
    return exe


@dataclass
class DelayProxy:
    proc: subprocess.Popen
    port: int
    rtt_ms: float

    @classmethod
    def start(cls, upstream_port: int, rtt_ms: float, bind: str = "0.0.0.0", upstream_host: str | None = None,
              port: int = 0) -> DelayProxy:
        args = [str(build()), "--upstream-port", str(upstream_port), "--rtt-ms", repr(float(rtt_ms)),
                "--bind", bind, "--port", str(port)]
        if upstream_host:
            args += ["--upstream-host", upstream_host]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                text=True)
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if not line.isdigit():
            proc.kill()
            _, err = proc.communicate()
            raise RuntimeError(f"delayproxy did not start: {err.strip() or line!r}")
        return cls(proc, int(line), float(rtt_ms))

    def cpu_s(self) -> float:
        """The proxy's CPU so far: utime + stime from /proc (it has no children)."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def stop(self) -> str:
        """Stop it; its summary line ("delayproxy: C connections, U bytes up, D bytes down")."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            _, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return (err or "").strip()

    def __enter__(self) -> DelayProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
