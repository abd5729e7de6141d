"""The Slurm transport against a real Slurm (tests/support/slurm.py): a command it stops ends on the node.

srun killed on its own leaves its job step running on the node, outside any deadline (Slurm keeps
a step whose srun died).  Every way the transport stops a command (its deadline, the stdout cap,
close() from another thread, as Ctrl-C does) must end the step, not only srun.
"""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from orchestrator.inventory.model import Host
from orchestrator.transport import TransportOptions
from orchestrator.transport.slurm import SlurmTransport
from tests.support.slurm import SlurmCluster, missing_reason
from tests.support.slurm import allocation as allocated

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def allocation(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SlurmCluster, str]]:
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    with allocated(tmp_path_factory.mktemp("slurm"), 2, "fleetprobe-transport") as held:
        yield held


@pytest.fixture
def transport(allocation: tuple[SlurmCluster, str], monkeypatch: pytest.MonkeyPatch) -> SlurmTransport:
    c, job = allocation
    monkeypatch.setenv("SLURM_CONF", str(c.conf))
    host = Host("gpu-a", {"ansible_connection": "slurm", "probe_slurm_node": "node2", "probe_slurm_jobid": job})
    return SlurmTransport(host, TransportOptions(max_output=4096))


def _running(marker: str) -> list[str]:
    out = subprocess.run(["ps", "-eww", "-o", "args"], capture_output=True, text=True, check=True).stdout
    return [ln for ln in out.splitlines() if marker in ln]


def _assert_ended(c: SlurmCluster, job: str, marker: str) -> None:
    """The step and its task are gone (Slurm needs a moment to reap a step it signalled)."""
    end = time.monotonic() + 20
    while (c.steps(job) or _running(marker)) and time.monotonic() < end:
        time.sleep(0.25)
    assert _running(marker) == [], f"the task still runs on the node:\n{c.logs()}"
    assert c.steps(job) == [], f"the step is still in the allocation:\n{c.logs()}"


def _script(marker: str, loop: bool = False) -> bytes:
    """What the runner sends: a Python program on stdin.  It says it started, then waits in a shell
    whose arguments carry the marker (so ps on the node finds the task), or prints without end."""
    if loop:
        return f"while True: print({marker!r}, flush=True)\n".encode()
    return (f"import os\nprint('started', flush=True)\n"
            f"os.execvp('sh', ['sh', '-c', 'sleep 300; : {marker}'])\n").encode()


PYTHON = "python3 -I -S -"


def test_a_command_past_its_deadline_ends_its_step(allocation: tuple[SlurmCluster, str],
                                                   transport: SlurmTransport) -> None:
    c, job = allocation
    marker = uuid.uuid4().hex
    res = transport.run(PYTHON, _script(marker), timeout=6)
    assert res.timed_out and res.exit_code is None
    assert res.stdout == b"started\n", res.stderr
    _assert_ended(c, job, marker)


def test_a_command_past_the_output_cap_ends_its_step(allocation: tuple[SlurmCluster, str],
                                                     transport: SlurmTransport) -> None:
    c, job = allocation
    marker = uuid.uuid4().hex
    res = transport.run(PYTHON, _script(marker, loop=True), timeout=60)
    assert res.stdout_truncated and len(res.stdout) == 4096 and marker.encode() in res.stdout
    _assert_ended(c, job, marker)


@pytest.mark.parametrize("when", ["working", "starting"])
def test_close_from_another_thread_ends_the_step(allocation: tuple[SlurmCluster, str], transport: SlurmTransport,
                                                 when: str) -> None:
    """Ctrl-C closes the transports from the main thread: while the task works, and while srun is
    still creating and launching the step (the task must not start after srun has gone)."""
    c, job = allocation
    marker = uuid.uuid4().hex
    started = threading.Event()
    results = []
    worker = threading.Thread(target=lambda: results.append(
        transport.run(PYTHON, _script(marker), timeout=120, on_output=lambda _: started.set())))
    worker.start()
    if when == "working":
        assert started.wait(60), f"the step never started:\n{c.logs()}"
    else:
        time.sleep(0.2)
    transport.close()
    worker.join(timeout=30)
    assert not worker.is_alive() and results and results[0].exit_code != 0
    _assert_ended(c, job, marker)
