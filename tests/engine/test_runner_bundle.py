"""Several probes in one interpreter (orchestrator/engine/bundle.py + probes/_bundle.py).

The bundle runs under a real `python -I -S -`, with probes of our own that misbehave the ways hosts
do (a segfault, a C call that holds the GIL, a flood, frames forged on stdout), and with the real
probes over the local transport, bundled and one by one, which must give the same results.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import ClassVar

import pytest

from orchestrator.engine import bundle
from orchestrator.engine import payload as probes
from orchestrator.engine.outcomes import CUT_OFF, Outcome
from orchestrator.engine.runner import (
    HostResult,
    ProbeCall,
    ProbeResult,
    RunOptions,
    bundles,
    classify,
    run_host,
)
from orchestrator.inventory.model import Host
from orchestrator.simulate.fake_nvml import FixtureError, build_fake_nvml
from orchestrator.simulate.sysfs import build_machine
from orchestrator.transport.base import CommandResult, TransportOptions
from orchestrator.transport.local import LocalTransport
from tests.support.skips import not_here
from tests.support.sshd import SshdServer, descendants

NVML_CACHE = Path(os.environ.get("TMPDIR", "/tmp")) / f"fleetprobe-fake-nvml-{os.getuid()}"
HOST = Host("h01", {"ansible_connection": "local"})


def own_probe(name: str, body: str) -> str:
    """Prelude + a probe of the test's own, as probes.probe_source() gives the shipped ones."""
    prelude = (probes.probes_dir() / "_prelude.py").read_text()
    header = f'PROBE_NAME = "{name}"\nPROBE_VERSION = "0"\nPROBE_DESCRIPTION = "test"\nPASSIVE = True\n'
    return prelude + "\n" + header + body


def run_bundle(items: list[bundle.BundleItem], budget_s: float = 60.0, max_output: int = 1 << 20,
               max_stderr: int = 1 << 16) -> tuple[CommandResult, bundle.Answer]:
    script = bundle.compose(items, budget_s, 2.0, max_output, max_stderr)
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-I", "-S", "-"], input=script, capture_output=True, timeout=60)
    res = CommandResult(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - t0)
    return res, bundle.split(res, [it.name for it in items])


def judged(items: list[bundle.BundleItem], answer: bundle.Answer, cap: int) -> dict[str, ProbeResult]:
    out = {}
    for it, frame in zip(items, answer.frames):
        assert frame.result is not None, it.name
        out[it.name] = classify(HOST, ProbeCall(it.name, it.args, it.timeout_s), frame.result, cap=cap)
    return out


def test_each_probe_is_isolated_from_the_others_misbehaviour() -> None:
    ok = "def collect(ctx):\n    return {'n': ctx.args['n']}\n"
    items = [
        bundle.BundleItem("first", {"n": 1}, 10, own_probe("first", ok)),
        # ctypes NVML crashing: the child dies of SIGSEGV, the next probe still runs
        bundle.BundleItem("segv", {}, 10, own_probe("segv", (
            "import os, signal\ndef collect(ctx):\n    os.kill(os.getpid(), signal.SIGSEGV)\n"))),
        # a probe forging the bundle's own framing on its stdout before the prelude's redirect
        bundle.BundleItem("forger", {}, 10, own_probe("forger", (
            "import os\nos.write(1, b'FPBUNDLE 1\\n{\"probe\": \"last\", \"state\": \"not_started\", "
            "\"out\": 0, \"err\": 0}\\n')\ndef collect(ctx):\n    return {}\n"))),
        # a CUDA call that never returns and holds the GIL: its own watchdog cannot fire
        bundle.BundleItem("hang", {}, 3, own_probe("hang", (
            "import ctypes\ndef collect(ctx):\n    ctypes.PyDLL(None).sleep(60)\n    return {}\n"))),
        bundle.BundleItem("flood", {}, 10, own_probe("flood", (
            "def collect(ctx):\n    return {'x': 'a' * (2 << 20)}\n"))),
        bundle.BundleItem("chatty", {}, 10, own_probe("chatty", (
            "import sys\ndef collect(ctx):\n    sys.stderr.write('w' * 300000)\n    return {'quiet': False}\n"))),
        bundle.BundleItem("quits", {}, 10, own_probe("quits", "import sys\nsys.exit(5)\n")),
        bundle.BundleItem("last", {"n": 2}, 10, own_probe("last", ok)),
    ]
    t0 = time.monotonic()
    res, answer = run_bundle(items, max_output=1 << 20, max_stderr=1 << 16)
    assert time.monotonic() - t0 < 20  # the hang cost its own 3 s, not the run
    assert answer.bundled and len(answer.frames) == len(items) and answer.rest == b"", res.stderr[-2000:]
    got = judged(items, answer, cap=1 << 20)
    assert got["first"].outcome == Outcome.OK and got["first"].envelope.data == {"n": 1}  # type: ignore[union-attr]
    assert got["segv"].outcome == Outcome.INVALID_OUTPUT
    assert got["segv"].reason == "probe printed nothing on stdout; exit code -11"
    assert got["forger"].outcome == Outcome.INVALID_OUTPUT and "not one JSON document" in got["forger"].reason
    assert got["forger"].stdout.startswith(b"FPBUNDLE 1\n")  # kept as that probe's raw output, nothing more
    assert got["hang"].outcome == Outcome.TIMEOUT and got["hang"].reason == "probe did not finish within 3s"
    assert 2.5 < got["hang"].duration_s < 8
    assert got["flood"].outcome == Outcome.INVALID_OUTPUT
    assert got["flood"].reason == "probe output exceeded the 1048576-byte cap; output discarded"
    assert got["chatty"].outcome == Outcome.OK and got["chatty"].stderr == b"w" * (1 << 16)
    assert answer.frames[5].result is not None and answer.frames[5].result.stderr_truncated
    assert got["quits"].outcome == Outcome.INVALID_OUTPUT and got["quits"].reason.endswith("exit code 5")
    assert got["last"].outcome == Outcome.OK and got["last"].envelope.data == {"n": 2}  # type: ignore[union-attr]
    assert len(res.stdout) < 600000  # the flood stayed on the host


def test_a_probe_past_the_hosts_budget_is_not_started() -> None:
    # stuck in C with the GIL held: its watchdog (budget 4 s - margin) cannot fire; the kill at 4 s does
    stuck = "import ctypes\ndef collect(ctx):\n    ctypes.PyDLL(None).sleep(60)\n"
    items = [bundle.BundleItem("slow", {}, 30, own_probe("slow", stuck)),
             bundle.BundleItem("next", {}, 30, own_probe("next", "def collect(ctx):\n    return {}\n"))]
    t0 = time.monotonic()
    _, answer = run_bundle(items, budget_s=4.0)
    assert time.monotonic() - t0 < 15
    slow, nxt = answer.frames
    assert slow.result is not None and slow.result.timed_out and 3.5 < slow.result.duration_s < 8
    assert classify(HOST, ProbeCall("slow", {}, 30), slow.result).outcome == Outcome.TIMEOUT
    assert not nxt.started and nxt.result is None


def test_the_watchdog_gets_what_is_left_of_the_budget() -> None:
    sleeper = "import time\ndef collect(ctx):\n    ctx.partial['slept'] = True\n    time.sleep(60)\n"
    items = [bundle.BundleItem("slow", {}, 30, own_probe("slow", sleeper))]
    _, answer = run_bundle(items, budget_s=4.0)
    assert answer.frames[0].result is not None
    # as a lone probe with 4 s left: the watchdog fires at 4 s minus the 2 s margin, with partial data
    got = classify(HOST, ProbeCall("slow", {}, 30), answer.frames[0].result)
    assert got.outcome == Outcome.FAILED and "probe deadline of 2.0s exceeded" in got.reason
    assert got.envelope is not None and got.envelope.data == {"slept": True}


def _frame(name: str, stdout: bytes = b"", stderr: bytes = b"", **over: object) -> bytes:
    import json

    head = {"probe": name, "state": "ran", "exit": 0, "timed_out": False, "out_trunc": False, "err_trunc": False,
            "duration_s": 0.1, "out": len(stdout), "err": len(stderr), **over}
    return json.dumps(head).encode() + b"\n" + stdout + stderr


@pytest.mark.parametrize("tail", [
    _frame("b", b"{}", out=99),  # claims more bytes than arrived
    _frame("c", b"{}"),  # not the probe expected next
    b'{"probe": "b", "state": "ran"\n',  # not a full header
    b"x" * 5000,  # no header line at all
    _frame("b", b"{}", exit=True),  # a bool is not an exit code
    _frame("b", b"{}", out=-1),
    _frame("b", b"{}", state="odd"),
], ids=["short", "wrong-probe", "bad-header", "no-newline", "bool-exit", "negative-length", "bad-state"])
def test_reading_stops_at_the_first_thing_that_is_not_a_frame(tail: bytes) -> None:
    out = bundle.MAGIC + _frame("a", b'{"x": 1}', b"note\n") + tail
    answer = bundle.split(CommandResult(0, out, b"", 1.0), ["a", "b"])
    assert answer.bundled and len(answer.frames) == 1 and answer.rest == tail
    a = answer.frames[0].result
    assert a is not None and a.stdout == b'{"x": 1}' and a.stderr == b"note\n" and a.exit_code == 0


def test_an_answer_that_is_not_a_bundle_is_left_whole() -> None:
    answer = bundle.split(CommandResult(2, b"Welcome!\n", b"Unknown option: -I\n", 0.1), ["a", "b"])
    assert not answer.bundled and answer.frames == [] and answer.rest == b"Welcome!\n"


def test_bundling_applies_only_where_it_saves_interpreter_starts() -> None:
    two = [ProbeCall("host"), ProbeCall("pcie")]
    assert bundles(Host("a", {"ansible_connection": "local"}), two, RunOptions())
    assert bundles(Host("a", {}), two, RunOptions())  # ssh
    assert not bundles(Host("a", {}), two[:1], RunOptions())  # one probe: as before
    assert not bundles(Host("a", {"ansible_connection": "replay"}), two, RunOptions())  # recordings per probe
    assert not bundles(Host("a", {"probe_mode": "raw"}), two, RunOptions())
    assert not bundles(Host("a", {}), two, RunOptions(bundle=False))


# -- the real probes through run_host --------------------------------------------------------------


class CountingLocal(LocalTransport):
    """The local transport, counting the commands it starts."""

    commands: ClassVar[list[str]] = []

    def run(self, command: str, stdin: bytes = b"", timeout: float | None = None, *,
            deadline: float | None = None) -> CommandResult:
        CountingLocal.commands.append(command)
        return super().run(command, stdin, timeout, deadline=deadline)


def _run(host: Host, calls: list[ProbeCall], bundle_on: bool, stop: threading.Event | None = None) -> HostResult:
    CountingLocal.commands = []
    return run_host(host, calls, RunOptions(bundle=bundle_on, transport=TransportOptions()),
                    lambda h, o: CountingLocal(h, o), stop or threading.Event(), {}, threading.Lock())


@pytest.fixture(scope="module")
def machine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = build_machine("dgx-h100", tmp_path_factory.mktemp("h100") / "root")
    try:
        lib = build_fake_nvml("dgx-h100", NVML_CACHE)
    except FixtureError as e:
        pytest.skip(f"cannot build the fake NVML here: {e}")
    return {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "probe_root": str(root),
            "probe_args": {"nvml": {"lib": str(lib)}, "nvlink": {"lib": str(lib)}}}


def test_the_audit_probes_bundled_give_what_they_give_one_by_one(machine: dict[str, object]) -> None:
    host = Host("h01", dict(machine))
    calls = [ProbeCall(n, {}, 30.0) for n in ("host", "pcie", "nvml", "nvlink")]
    alone = _run(host, calls, False)
    assert len(CountingLocal.commands) == 4
    together = _run(host, calls, True)
    assert len(CountingLocal.commands) == 1 and CountingLocal.commands[0].endswith(" -I -S -")
    for c in calls:
        a, b = alone.probes[c.name], together.probes[c.name]
        assert (a.outcome, a.reason) == (b.outcome, b.reason) == (Outcome.OK, ""), (c.name, a.reason, b.reason)
        assert a.envelope is not None and b.envelope is not None
        if c.name == "host":  # uptime moves between the two runs
            a.envelope.data.pop("uptime_s")
            b.envelope.data.pop("uptime_s")
        if c.name == "nvml":  # so does the CPU timestamp of each violation-time reading
            for g in [*a.envelope.data["gpus"], *b.envelope.data["gpus"]]:
                (g.get("violation_ns") or {}).pop("reference_us", None)
        assert a.envelope.data == b.envelope.data, c.name
    assert together.probes["nvml"].envelope.data["gpus"]  # type: ignore[union-attr]


def _fifo_lib(tmp_path: Path) -> str:
    # dlopen() of a FIFO blocks in open() until a writer comes: a driver call that never returns
    if not Path("/proc/self/wchan").is_file():
        not_here("no /proc/<pid>/wchan to see the hung open")
    fifo = tmp_path / "libnvidia-ml.so.1"
    os.mkfifo(fifo)
    return str(fifo)


def _has_reader(fifo: str) -> bool:
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as e:
        assert e.errno == errno.ENXIO
        return False
    os.close(fd)
    return True


def _stuck_in_fifo_open() -> bool:
    """A process of ours blocked opening the FIFO (looked up without opening it: a writer's open
    would wake the reader and end the hang)."""
    for pid in descendants(os.getpid()):
        try:
            if Path(f"/proc/{pid}/wchan").read_text() == "wait_for_partner":
                return True
        except OSError:
            continue
    return False


def test_a_hung_library_call_costs_that_probe_only_and_is_judged_as_alone(
        machine: dict[str, object], tmp_path: Path) -> None:
    fifo = _fifo_lib(tmp_path)
    host = Host("h01", {**machine, "probe_args": {"nvml": {"lib": fifo}}})
    calls = [ProbeCall("nvml", {}, 4.0), ProbeCall("pcie", {}, 30.0)]
    alone = _run(host, calls, False)
    t0 = time.monotonic()
    together = _run(host, calls, True)
    assert time.monotonic() - t0 < 12
    assert together.probes["nvml"].outcome in (Outcome.TIMEOUT, Outcome.FAILED)
    assert (together.probes["nvml"].outcome, together.probes["nvml"].reason) == \
        (alone.probes["nvml"].outcome, alone.probes["nvml"].reason)
    assert together.probes["pcie"].outcome == Outcome.OK
    assert not _has_reader(fifo)  # the stuck child was killed, not left behind


def test_interrupting_a_bundle_keeps_the_finished_probes(machine: dict[str, object], tmp_path: Path) -> None:
    fifo = _fifo_lib(tmp_path)
    host = Host("h01", {**machine, "probe_args": {"nvml": {"lib": fifo}}})
    calls = [ProbeCall("host", {}, 30.0), ProbeCall("nvml", {}, 30.0), ProbeCall("pcie", {}, 30.0)]
    stop = threading.Event()
    active: dict[str, LocalTransport] = {}
    out: list[HostResult] = []

    def worker() -> None:
        out.append(run_host(host, calls, RunOptions(), lambda h, o: LocalTransport(h, o), stop,
                            active, threading.Lock()))  # type: ignore[arg-type]

    t = threading.Thread(target=worker)
    t0 = time.monotonic()
    t.start()
    while not _stuck_in_fifo_open() and time.monotonic() - t0 < 20:  # nvml is stuck: host is done
        time.sleep(0.05)
    assert time.monotonic() - t0 < 20, "the nvml probe never reached its hung library"
    stop.set()
    for tr in list(active.values()):  # what run_fleet does on Ctrl-C
        tr.close()
    t.join(20)
    assert not t.is_alive() and time.monotonic() - t0 < 25
    res = out[0]
    assert res.probes["host"].outcome == Outcome.OK
    # cut off mid-probe (and the one after it, in the same bundle): interrupted, not "never started"
    assert res.probes["nvml"].outcome == Outcome.INTERRUPTED and res.probes["nvml"].reason == CUT_OFF
    assert res.probes["pcie"].outcome == Outcome.INTERRUPTED
    assert not _has_reader(fifo)


def _fake_interpreter(directory: Path, name: str, body: str) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(f"#!{sys.executable}\nimport sys\nsys.stdin.buffer.read()\n{body}\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("body", [
    "print('Welcome to host!')",
    "print('{\"envelope_version\": 1, \"probe\": \"host\", \"probe_version\": \"1\", \"status\": \"ok\", "
    "\"data\": {}, \"errors\": [], \"warnings\": [], \"duration_s\": 0}')",
    "sys.stderr.write('sudo: a password is required\\n'); sys.exit(1)",
    "sys.exit(0)",
], ids=["text", "host-envelope", "sudo-refusal", "silent"])
def test_an_interpreter_that_is_not_ours_is_judged_as_it_was_probe_by_probe(tmp_path: Path, body: str) -> None:
    host = Host("h01", {"ansible_connection": "local",
                        "ansible_python_interpreter": _fake_interpreter(tmp_path / "bin", "python3", body)})
    calls = [ProbeCall("host", {}, 10.0), ProbeCall("pcie", {}, 10.0)]
    alone, together = _run(host, calls, False), _run(host, calls, True)
    assert {n: (p.outcome, p.reason) for n, p in together.probes.items()} == \
        {n: (p.outcome, p.reason) for n, p in alone.probes.items()}
    assert together.probes["pcie"].outcome != Outcome.OK


def test_a_probe_that_cannot_be_started_says_why_and_the_bundle_goes_on() -> None:
    import resource

    ok = "def collect(ctx):\n    return {}\n"
    items = [bundle.BundleItem(n, {}, 10, own_probe(n, ok)) for n in ("a", "b")]
    script = bundle.compose(items, 30, 2.0, 1 << 20, 1 << 16)
    # five descriptors: enough to start Python and hold our frames, not for a probe's two pipes
    proc = subprocess.run([sys.executable, "-I", "-S", "-"], input=script, capture_output=True, timeout=60,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (5, 5)))
    answer = bundle.split(CommandResult(proc.returncode, proc.stdout, proc.stderr, 1.0), ["a", "b"])
    assert len(answer.frames) == 2, proc.stderr[-2000:]
    for it, frame in zip(items, answer.frames):
        assert frame.result is not None
        got = classify(HOST, ProbeCall(it.name, {}, 10), frame.result)
        assert got.outcome == Outcome.INVALID_OUTPUT
        assert got.reason == ("probe printed nothing on stdout; exit code 1; stderr: cannot start the probe on the "
                              "host: [Errno 24] Too many open files")


def _ours_stuck(marker: str) -> bool:
    """A process started through `marker` (our interpreter's path) blocked opening a FIFO."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes() and \
                    Path(f"/proc/{entry}/wchan").read_text() == "wait_for_partner":
                return True
        except OSError:
            continue
    return False


def _interrupt_over_ssh(sshd: SshdServer, tmp_path: Path) -> tuple[HostResult, str]:
    from orchestrator.transport.factory import open_transport

    fifo = _fifo_lib(tmp_path)
    python = tmp_path / "bin" / "python3"  # a path of our own, to find our processes on the "host"
    python.parent.mkdir()
    python.symlink_to(os.path.realpath(sys.executable))
    host = sshd.fleet(1, ansible_python_interpreter=str(python), probe_args={"nvml": {"lib": fifo}})[0]
    calls = [ProbeCall("host", {}, 30.0), ProbeCall("nvml", {}, 30.0), ProbeCall("pcie", {}, 30.0)]
    stop = threading.Event()
    active: dict[str, object] = {}
    out: list[HostResult] = []
    t = threading.Thread(target=lambda: out.append(run_host(
        host, calls, RunOptions(transport=sshd.options()), open_transport, stop, active,  # type: ignore[arg-type]
        threading.Lock())))
    t0 = time.monotonic()
    t.start()
    while not _ours_stuck(str(python)) and time.monotonic() - t0 < 20:
        time.sleep(0.05)
    assert time.monotonic() - t0 < 20, "the nvml probe never reached its hung library"
    stop.set()
    for tr in list(active.values()):
        tr.close()  # type: ignore[attr-defined]
    t.join(20)
    assert not t.is_alive()
    return out[0], str(python)


@pytest.mark.ssh
def test_interrupting_a_bundle_over_ssh_stops_it_on_the_host(sshd: SshdServer, tmp_path: Path) -> None:
    if not Path("/proc/self/wchan").is_file():
        not_here("no /proc/<pid>/wchan to see the hung open")
    res, python = _interrupt_over_ssh(sshd, tmp_path)
    assert {p.outcome for n, p in res.probes.items() if n != "host"} == {Outcome.INTERRUPTED}  # cut off, not unstarted
    t0 = time.monotonic()
    while _ours_stuck(python) and time.monotonic() - t0 < 5:
        time.sleep(0.05)
    assert not _ours_stuck(python)  # the bundle saw its channel close and killed the stuck probe


@pytest.mark.ssh
def test_interrupting_a_bundle_over_ssh_keeps_the_finished_probes(sshd: SshdServer, tmp_path: Path) -> None:
    if not Path("/proc/self/wchan").is_file():
        not_here("no /proc/<pid>/wchan to see the hung open")
    res, _ = _interrupt_over_ssh(sshd, tmp_path)
    assert res.probes["host"].outcome == Outcome.OK
