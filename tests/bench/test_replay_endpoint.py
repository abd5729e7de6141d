"""The fan-out benchmark's replaying endpoints (issue 51 item 4): bench/replayhost.c behind a real sshd's
ForceCommand and bench/replayserver.py (one asyncssh process), answering from recordings of the real probe.

What the benchmark's table relies on:
- every tool (`probe run`, the OpenSSH fan-out, pssh, `ansible -m script`) gets through the endpoint the
  envelope the real probe printed when it was recorded, with its own login's $SSH_CONNECTION, and no
  script goes unrecorded (nothing recorded during the run: every answer came from a recording);
- a script is run by the real python3 once and replayed after (sshd endpoint), or refused with a clear
  message when it was never recorded (asyncssh endpoint): other options, other bytes, no bytes;
- the endpoint's CPU per login is measured, and is a fraction of the real probe's;
- a row whose host side + proxy passes 50 % of the cores is marked machine-bound and its ratio left out.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.delay import bench_module
from tests.support.skips import not_here

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not (shutil.which("gcc") or shutil.which("cc"))
                                or not (shutil.which("sshd") or Path("/usr/sbin/sshd").exists()),
                                reason="needs gcc and sshd")


fb = bench_module("fleet_bench")


class Bench:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.work = fb.host_work(tmp)
        self.fleet_dir = tmp / "fleet"


@pytest.fixture(scope="module")
def bench() -> Iterator[Bench]:
    if os.geteuid() != 0:
        not_here("the benchmark's sshd logs in its own user `fpbench`, which only root can create")
    old = os.umask(0o022)  # the login user reads the keys' folder and the scripts
    tmp = Path(tempfile.mkdtemp(prefix="fp-replay-"))
    tmp.chmod(0o755)
    try:
        b = Bench(tmp)
        # the real probe, recorded through a real sshd login, for the two scripts the tools send
        assert fb.record_answers(b.fleet_dir, b.work, tmp, ["openssh", "probe"]) == 2
        yield b
    finally:
        os.umask(old)
        shutil.rmtree(tmp, ignore_errors=True)


def _envelopes(tool: str, tmp: Path) -> list[dict]:
    """What `tool` brought back from the hosts, read from where fleet_bench's runner left it."""
    if tool == "probe":
        raw = tmp / "probe-results" / "run" / "raw"
        return fb.envelopes_from_files(p for p in raw.glob("*/*.json") if p.name != "_host.json")
    if tool == "openssh":
        return fb.envelopes_from_files((tmp / "ssh-out").glob("*.json"))
    if tool == "pssh":
        return fb.envelopes_from_files(p for p in (tmp / "pssh-out").glob("*/*") if p.is_file())
    return fb._envelopes_in((tmp / "ansible-script.json").read_text(errors="replace"))


def _recorded(b: Bench, fleet, tool: str) -> dict:
    if tool == "probe":  # `probe run` sends its own script (start mark, `-I -S`): the recording of that
        recs = [r for r in fleet.replay.recordings() if r.stdout.startswith("FPSTART")]
        assert len(recs) == 1
        return recs[0].envelopes()[0]
    rec = fleet.replay.recording_for([], b.work.script("host").read_bytes())
    assert rec is not None, "replayhost.c and replayhost.py disagree on the recording's key"
    return rec.envelopes()[0]


TOOLS = {"probe": None, "openssh": None, "pssh": "parallel-ssh", "ansible-script": "ansible"}


@pytest.mark.parametrize("endpoint", ["sshd", "asyncssh"])
@pytest.mark.parametrize("tool", list(TOOLS))
def test_each_tool_gets_the_real_probes_recorded_envelope(bench: Bench, endpoint: str, tool: str) -> None:
    if endpoint == "asyncssh":
        pytest.importorskip("asyncssh", reason="bench/replayserver.py needs asyncssh (the test extra)")
    exe = TOOLS[tool]
    if exe and not (fb.pssh_exe() if tool == "pssh" else fb.ansible_exe()):
        pytest.skip(f"needs {exe} (scripts/test.sh installs it)")
    n = 4
    fleet = fb.start_fleet(n, bench.fleet_dir, replay=endpoint)
    try:
        before = fleet.replay.count()
        m = fb.RUNNERS[tool](fleet, n, n, bench.work, bench.tmp)
        envs = _envelopes(tool, bench.tmp)
    finally:
        fleet.stop()
    assert (m.reached, m.ok) == (n, n), (m.bad, m.why)
    assert fleet.replay.count() == before, "a script reached the real python3: the run was not all replayed"
    want = _recorded(bench, fleet, tool)
    assert fb.uses_placeholder(want)
    conns = set()
    for env in envs:
        conn = env["data"]["ssh_connection"]
        conns.add(conn.split()[2])
        got = {k: v for k, v in env.items() if k in want}  # `probe run` may store fields of its own beside
        assert got == fb.replayed(want, conn)
    assert len(conns) == n  # each login its own $SSH_CONNECTION, not the recording's


def _ssh(fleet, command: str, stdin: bytes, address: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ssh", *fleet.ssh_opts, "-p", str(fleet.port), "-l", fleet.user, address, command],
                          input=stdin, capture_output=True, timeout=60)


def test_sshd_endpoint_runs_a_new_script_once_then_replays_it(bench: Bench) -> None:
    where = bench.tmp / "marks"  # the login user writes here (pytest's tmp_path is root's alone)
    where.mkdir()
    where.chmod(0o777)
    marks = where / "ran"
    script = (f"import os\nopen({str(marks)!r}, 'a').write('x')\n"
              "print('conn=' + os.environ['SSH_CONNECTION'])\nraise SystemExit(3)\n").encode()
    fleet = fb.start_fleet(3, bench.fleet_dir, replay="sshd")
    try:
        outs = [_ssh(fleet, "python3 -", script, a) for a in fleet.addresses[:3]]
    finally:
        fleet.stop()
    assert marks.read_text() == "x"  # the real python3 ran for the first login only
    for out, address in zip(outs, fleet.addresses[:3]):
        assert out.returncode == 3  # the recorded exit status
        assert out.stdout.decode().split()[-2:] == [address, str(fleet.sshd_port)]


@pytest.mark.parametrize("command,script", [
    ("python3 -", b"print('never recorded')\n"),  # other bytes
    ("python3 -I -", None),  # the recorded bytes with other options
    ("python3 -", b""),  # no bytes at all
    ("python3 -S -I -", None),
])
def test_asyncssh_endpoint_refuses_what_was_never_recorded(bench: Bench, command: str, script: bytes | None) -> None:
    pytest.importorskip("asyncssh", reason="bench/replayserver.py needs asyncssh (the test extra)")
    fleet = fb.start_fleet(1, bench.fleet_dir, replay="asyncssh")
    try:
        before = fleet.replay.count()
        out = _ssh(fleet, command, bench.work.script("host").read_bytes() if script is None else script,
                   fleet.addresses[0])
        after = fleet.replay.count()
    finally:
        fleet.stop()
    assert out.returncode == 97
    assert out.stdout == b""
    assert b"no recording for this script; record it through the sshd endpoint first" in out.stderr
    assert after == before


def test_endpoints_cpu_per_login_is_measured_and_a_fraction_of_the_real_probes(bench: Bench) -> None:
    pytest.importorskip("asyncssh", reason="bench/replayserver.py needs asyncssh (the test extra)")
    n = 8
    costs = {c.endpoint: c for c in (fb.login_cost(k, bench.fleet_dir, bench.work, bench.tmp, n)
                                     for k in ("", "sshd", "asyncssh"))}
    real = costs["real probe"].ms_per_login
    assert real > 0
    for kind in ("sshd", "asyncssh"):
        assert costs[kind].problems == ()
        assert 0 < costs[kind].ms_per_login < real / 2, costs
    table = fb.endpoint_check(list(costs.values()), "asyncssh", n)
    assert "| asyncssh (used below) | " in table and "| real probe | " in table


def _row(tool: str, wall: float, host: float, proxy: float = 0.0, forks: int = 32, rtt: float = 20.0):
    return fb.Measure(tool, 1000, forks, wall, 10.0, 50.0, 1000, 1000, host_cpu_s=host, rtt_ms=rtt,
                      proxy_cpu_s=proxy)


def _cores() -> int:
    return os.cpu_count() or 1


@pytest.mark.parametrize("probe_host,peer_host,peer_proxy,counted", [
    (0.30, 0.30, 0.0, True),  # both well under half the cores
    (0.50, 0.50, 0.0, True),  # exactly half: not over
    (0.51, 0.30, 0.0, False),  # `probe run`'s own row machine-bound
    (0.30, 0.51, 0.0, False),  # the best peer's row machine-bound (its wall measures the machine)
    (0.30, 0.45, 0.06, False),  # the proxy's CPU counts with the hosts'
    (1.00, 1.00, 0.0, False),  # saturated, as the old table was
])
def test_rows_over_half_the_cores_are_machine_bound_and_not_counted(probe_host: float, peer_host: float,
                                                                   peer_proxy: float, counted: bool) -> None:
    cores, wall = _cores(), 10.0
    rows = [_row("probe run", wall * 1.2, probe_host * cores * wall * 1.2),
            _row("openssh fan-out", wall, peer_host * cores * wall, peer_proxy * cores * wall),
            _row("pssh", wall * 2, 0.1 * cores * wall * 2)]  # slower: not the best peer
    (ratio,) = fb.probe_ratios(rows, cores)
    assert (ratio.peer, round(ratio.ratio, 2), ratio.counted) == ("openssh fan-out", 1.2, counted)
    table = fb.summarize_latency(rows)
    probe_line = next(line for line in table.splitlines() if "| probe run |" in line)
    assert ("| 1.20 |" in probe_line) == counted and ("1.20 (not counted)" in probe_line) == (not counted)
    bound = {line.split(" | ")[3]: line.split(" | ")[12] for line in table.splitlines() if line.startswith("| 20 |")}
    assert bound == {"probe run": "yes" if probe_host > 0.5 else "no",
                     "openssh fan-out": "yes" if peer_host + peer_proxy > 0.5 else "no", "pssh": "no"}
    goal = fb.goal_line(rows, cores)
    assert ("NOT met: 0 of 1 counted cells within 1.0×" in goal) == counted
    assert ("all 1 of `probe run`'s cells are machine-bound" in goal) == (not counted)


def test_goal_line_counts_only_cells_not_machine_bound() -> None:
    cores, wall = _cores(), 10.0
    rows = [_row("probe run", wall * 0.9, 0.2 * cores * wall, forks=32), _row("pssh", wall, 0.2 * cores * wall, forks=32),
            _row("probe run", wall * 3, 0.9 * cores * wall * 3, forks=256), _row("pssh", wall, 0.2 * cores * wall, forks=256)]
    goal = fb.goal_line(rows, cores)
    assert "met: 1 of 1 counted cells within 1.0× (1 machine-bound, not counted); worst counted: 0.90× pssh" in goal
    assert "NOT" not in goal
    # a slower `probe run` at another size is in the table, not in the goal at 1,000 hosts
    small = [dataclasses.replace(r, n=200, wall_s=r.wall_s * (3 if r.tool == "probe run" else 1)) for r in rows[:2]]
    assert fb.goal_line(rows + small, cores) == goal
    assert "NOT met: 0 of 1 counted cells" in fb.goal_line(rows + small, cores, hosts=200)


@pytest.mark.parametrize("command,stdin,want", [
    ("python3 -c 'print(6*7)'", b"", b"42\n"),  # Ansible's raw module: code inline, nothing to key on
    ("python3 -I -c 'print(6*7)'", b"", b"42\n"),
    ("python3 -m json.tool --compact", b'{"a": 1}', b'{"a":1}\n'),
    ("echo ~ && sleep 0", b"", None),  # Ansible's shell commands run for real
])
def test_sshd_endpoint_runs_what_it_cannot_replay_for_real(bench: Bench, command: str, stdin: bytes,
                                                           want: bytes | None) -> None:
    fleet = fb.start_fleet(1, bench.fleet_dir, replay="sshd")
    try:
        before = fleet.replay.count()
        out = _ssh(fleet, command, stdin, fleet.addresses[0])
        after = fleet.replay.count()
    finally:
        fleet.stop()
    assert out.returncode == 0, out.stderr
    assert out.stdout == (want if want is not None else f"/home/{fleet.user}\n".encode())
    assert after == before  # nothing recorded: these are not replayed
