"""Replay transport: answers each probe with an envelope recorded earlier.

The bundled demo fleet uses it so a fresh machine without GPUs or SSH shows real probe output of
simulated machines.  Recordings are produced by `orchestrator.simulate.record` from the fixture
machines, never typed by hand.  Host variable `probe_replay` names the recording directory
(absolute, relative to the inventory, or the name of a bundled demo machine).
"""

from __future__ import annotations

import gzip
import re
import time
from pathlib import Path

from orchestrator.inventory.model import Host
from orchestrator.transport.base import (
    CommandResult,
    FailureKind,
    ProbeNotAvailable,
    TransportCapabilities,
    TransportError,
    TransportOptions,
)

DEMO_RECORDINGS = Path(__file__).resolve().parent.parent / "demo" / "recordings"
# The shipped script is self-describing: its probe file defines PROBE_NAME near the top.
_PROBE_NAME = re.compile(rb'^PROBE_NAME = "([A-Za-z0-9_]+)"', re.MULTILINE)
# A fabric qualification's coordinated steps name themselves in their arguments (api/fabric.py):
# their recorded answers (the whole stdout, said lines included) are <recording>/fabric/<step>.stdout.gz
# (simulate/record_fabric.py).
_STEP_ID = re.compile(rb'\\?"step_id\\?": \\?"([A-Za-z0-9_.:-]{1,80})\\?"')


def recording_dir(host: Host) -> Path:
    ref = host.vars.get("probe_replay")
    if not ref:
        raise TransportError(FailureKind.UNREACHABLE, f"{host.name}: ansible_connection=replay needs a probe_replay variable")
    path = Path(str(ref)).expanduser()
    if not path.is_absolute():
        # Relative to the inventory file that set the variable, else a bundled demo machine.
        origin = host.origins.get("probe_replay", "")
        base = Path(origin.rsplit(":", 1)[0]).parent if origin else None
        candidates = ([base / path] if base else []) + [DEMO_RECORDINGS / path]
        path = next((c for c in candidates if c.is_dir()), candidates[-1])
    return path


class ReplayTransport:
    # Answers each probe script from its recording: there is no interpreter to share.
    capabilities = TransportCapabilities()

    def __init__(self, host: Host, options: TransportOptions):
        self.host = host
        self.dir = recording_dir(host)
        if not self.dir.is_dir():
            raise TransportError(FailureKind.UNREACHABLE, f"{host.name}: no recordings at {self.dir}")

    def run(self, command: str, stdin: bytes = b"", timeout: float | None = None, *,
            deadline: float | None = None) -> CommandResult:
        t0 = time.monotonic()
        m = _PROBE_NAME.search(stdin)
        name = m.group(1).decode() if m else "?"
        call = stdin.rfind(b"\nfp_main(PROBE_NAME")  # the call line, arguments embedded, ends the script
        step = _STEP_ID.search(stdin, max(0, call))
        if step is not None:
            recorded = self.dir / "fabric" / f"{step.group(1).decode()}.stdout.gz"
            if recorded.is_file():
                return CommandResult(0, gzip.decompress(recorded.read_bytes()), b"", time.monotonic() - t0)
        path = self.dir / f"{name}.json"
        if not path.is_file():
            # A recording missing (a probe newer than the demo's recordings, a host left out) is not
            # the simulated host lacking the capability: the probe is skipped, its checks not judged.
            what = f"probe {name}" if m else "this command"
            raise ProbeNotAvailable(f"no recording of {what} for demo host {self.host.name}")
        data = path.read_bytes()
        return CommandResult(0, data, b"", _recorded_duration(data, time.monotonic() - t0))

    def close(self) -> None:
        pass


_DURATION = re.compile(rb'"duration_s":\s*([0-9]+(?:\.[0-9]+)?)')


def _recorded_duration(envelope: bytes, measured: float) -> float:
    """How long the probe took when it was recorded (the envelope's own duration_s, the key after
    its data), so a replayed run is the same run every time; else how long reading it took."""
    at = envelope.rfind(b'"duration_s":')
    m = _DURATION.match(envelope, at) if at >= 0 else None
    return float(m.group(1)) if m else measured
