"""`probe run --procs N` (issue 51 item 4): the fan-out spread over worker processes, over the real
loopback sshd.  The same run as one process; a worker killed mid-run costs only its hosts; Ctrl-C
and SIGTERM stop every worker as they stop one process; accept-new from two processes records
every key once, whole."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.engine.outcomes import Outcome
from orchestrator.engine.procs import process_count
from orchestrator.engine.runner import HostResult, ProbeCall, RunOptions, run_fleet
from orchestrator.inventory.model import Host
from orchestrator.transport.factory import (
    TRANSPORTS,
    open_transport,
    register_transport,
    unregister_transport,
)
from orchestrator.transport.local import LocalTransport
from tests.support.fleet import Cli, stop, wait_for
from tests.support.hostile import cli_env, host_record, interpreter, load_fleet, run_cli
from tests.support.sshd import ROOT_DIR, SshdServer, descendants

pytestmark = pytest.mark.ssh

SPAWNED = b"spawn_main"  # a multiprocessing "spawn" worker's command line


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # it ended while we looked
        return b""


def _workers(pid: int) -> list[int]:
    """The worker processes below the CLI process `pid`: spawned ones, or forked copies of it (these
    runs are too small for judging workers, the only other copies it forks)."""
    cli = _cmdline(pid)
    return [p for p in descendants(pid) if SPAWNED in _cmdline(p) or _cmdline(p) == cli]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _inventory(sshd: SshdServer, path: Path, hosts: dict[str, dict[str, Any]], known_hosts: bool = True) -> str:
    a = sshd.addresses
    fleet = [sshd.host(name, a[i % len(a)], **vars) for i, (name, vars) in enumerate(hosts.items())]
    path.write_text(sshd.inventory_yaml(fleet, known_hosts=known_hosts))
    return str(path)


def _ssh(sshd: SshdServer) -> list[str]:
    return ["--ssh-config", str(sshd.ssh_config)]


def _raw_done(run_dir: Path, names: list[str]) -> bool:
    return all((run_dir / "raw" / n / "_host.json").exists() for n in names)


def _comparable(fleet: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What a run found per host, without its timings."""
    rows = []
    for rec in fleet["hosts"]:
        probes = {name: (p["outcome"], p["reason"]) for name, p in rec["probes"].items()}
        findings = sorted((f["id"], f["severity"]) for f in rec.get("findings", []))
        rows.append((rec["name"], rec["outcome"], rec["reason"], probes, findings))
    return rows


def test_small_runs_and_what_a_worker_could_not_do_stay_in_one_process() -> None:
    def fleet(n: int, connection: str = "ssh") -> list[Host]:
        return [Host(f"h{i}", {"ansible_connection": connection}) for i in range(n)]

    assert process_count(fleet(10_000), 1, open_transport) == 1
    assert process_count(fleet(3), 8, open_transport) == 3  # never more workers than hosts
    assert process_count(fleet(12, "local"), 2, open_transport) == 2
    assert process_count(fleet(12), 2, lambda h, o: open_transport(h, o)) == 1  # a closure cannot reach a worker
    # a transport registered after import (the API's own), or one replacing a built-in: a fresh
    # process would not know it
    for name in ("custom-test", "local"):
        before = TRANSPORTS.get(name)
        register_transport(name, functools.partial(LocalTransport))  # not the object imported
        try:
            assert process_count(fleet(12, name), 2, open_transport) == 1, name
        finally:
            unregister_transport(name)
            if before is not None:
                register_transport(name, before)


def test_by_default_a_big_run_takes_a_process_a_core_where_workers_are_forked(monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.engine import procs

    fleet = [Host(f"h{i}") for i in range(10_000)]
    monkeypatch.setattr(procs, "usable_cores", lambda: 4)
    monkeypatch.setattr(procs, "start_method", lambda: "fork")
    assert process_count(fleet, None, open_transport) == 4
    assert process_count(fleet[:250], None, open_transport) == 2  # 100 hosts a worker at least
    assert process_count(fleet[:199], None, open_transport) == 1
    assert process_count(fleet, 1, open_transport) == 1  # --procs 1: one process, whatever the size
    assert process_count(fleet, 3, open_transport) == 3
    monkeypatch.setattr(procs, "usable_cores", lambda: 64)
    assert process_count(fleet, None, open_transport) == procs.MAX_PROCS
    monkeypatch.setattr(procs, "start_method", lambda: "spawn")  # ~1.7 s a worker: only when asked
    assert process_count(fleet, None, open_transport) == 1
    assert process_count(fleet, 2, open_transport) == 2


class _Recorded:
    def __init__(self) -> None:
        self.hosts: list[HostResult] = []

    def host_finished(self, result: HostResult) -> None:
        self.hosts.append(result)


_FORK_OR_SPAWN = r"""
import json, os, select, sys
from orchestrator.engine import procs
from orchestrator.engine.runner import ProbeCall, RunOptions, run_fleet
from orchestrator.inventory.model import Host
from orchestrator.transport.factory import open_transport

method = sys.argv[1]
chosen = procs.start_method()  # no thread but this one yet
procs.start_method = lambda: method
r, w = os.pipe()  # held by this process the way a judging worker's pipe is
held = []


class Sink:
    def host_finished(self, result):
        if not held:  # the workers still have hosts to run: does one of them hold `w`?
            os.close(w)
            ready, _, _ = select.select([r], [], [], 0)
            held.append(not (ready and os.read(r, 1) == b""))


class Quiet:
    def host_finished(self, result):
        pass


hosts = [Host(f"h{i}", {"ansible_connection": "local"}) for i in range(8)]
calls = [ProbeCall("host", timeout=30)]
two = run_fleet(hosts, calls, RunOptions(forks=2, procs=2), open_transport, Sink())
one = run_fleet(hosts, calls, RunOptions(forks=2, procs=1), open_transport, Quiet())
print(json.dumps({"chosen": chosen, "held": held,
                  "two": [(x.host.name, x.outcome.value) for x in two],
                  "one": [(x.host.name, x.outcome.value) for x in one]}))
"""


@pytest.mark.slow  # worker processes; spawned ones import Paramiko and Fabric: seconds each
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_forked_and_spawned_workers_give_the_same_run_and_hold_nothing_of_the_parent(method: str) -> None:
    proc = subprocess.run([sys.executable, "-c", _FORK_OR_SPAWN, method], capture_output=True, text=True,
                          timeout=120, cwd=str(ROOT_DIR), env=cli_env())
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["chosen"] == "fork"  # Linux, one thread: the cheap start
    assert out["two"] == out["one"] and [o for _, o in out["two"]] == ["ok"] * 8, out
    assert out["held"] == [False], "a worker kept the parent's pipe open"


def test_a_process_running_other_threads_spawns_its_workers() -> None:
    script = ("import threading; from orchestrator.engine.procs import start_method; a = start_method(); "
              "e = threading.Event(); t = threading.Thread(target=e.wait); t.start(); b = start_method(); "
              "e.set(); t.join(); print(a, b, start_method())")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                          cwd=str(ROOT_DIR), env=cli_env())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["fork", "spawn", "fork"]


@pytest.mark.slow  # spawned interpreters importing Paramiko and Fabric: seconds each
@pytest.mark.parametrize("executable", ["/nonexistent/python3", "/bin/false"])  # cannot start; ends at once
def test_workers_that_cannot_start_cost_their_hosts_with_the_reason(executable: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from multiprocessing import spawn

    from orchestrator.engine import procs

    monkeypatch.setattr(procs, "start_method", lambda: "spawn")  # an interpreter to start: the spawned kind
    hosts = [Host(f"h{i}", {"ansible_connection": "local"}) for i in range(4)]
    sink = _Recorded()
    before = spawn.get_executable()
    spawn.set_executable(executable)
    try:
        results = run_fleet(hosts, [ProbeCall("host", timeout=20)], RunOptions(forks=4, procs=2), open_transport, sink)
    finally:
        spawn.set_executable(before)
    assert [r.host.name for r in results] == [h.name for h in hosts]
    assert sorted(r.host.name for r in sink.hosts) == sorted(h.name for h in hosts)  # each recorded once
    for r in results:
        assert r.outcome == Outcome.FAILED, r.reason
        assert r.reason.startswith("the controller lost this host: its worker process (pid "), r.reason
        # gone before its job was sent, or before it read it: both name how it ended
        assert " exited with status " in r.reason, r.reason
        assert r.reason.endswith((" before it could start; probe it again", " before this host finished; probe it again"))
        assert "None" not in r.reason


@pytest.mark.slow  # spawned interpreters importing Paramiko and Fabric: seconds each
def test_two_processes_give_the_same_run_as_one(sshd: SshdServer, tmp_path: Path) -> None:
    names = [f"node{i:02d}" for i in range(1, 11)]
    inv = _inventory(sshd, tmp_path / "fleet.yml", {n: {} for n in names})
    fleets = {}
    for procs in ("1", "2"):
        cli = Cli.create(tmp_path / f"procs{procs}")
        run_dir = tmp_path / f"run{procs}"
        proc, fleets[procs] = cli.run_json("run", "-i", inv, "-o", str(run_dir), "--probe", "host", "--probe", "pcie",
                                           "-f", "4", "--procs", procs, *_ssh(sshd))
        assert proc.returncode in (0, 1), proc.stderr
        assert "Traceback" not in proc.stderr
        assert sorted(p.name for p in (run_dir / "raw").iterdir()) == names
    assert [r["name"] for r in fleets["2"]["hosts"]] == names  # inventory order
    assert _comparable(fleets["2"]) == _comparable(fleets["1"])
    assert all(r["outcome"] == "ok" for r in fleets["2"]["hosts"]), _comparable(fleets["2"])
    assert fleets["2"]["summary"]["outcomes"] == fleets["1"]["summary"]["outcomes"]


@pytest.mark.slow  # spawned interpreters importing Paramiko and Fabric: seconds each
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSEGV])  # killed; crashed
def test_a_killed_worker_costs_only_its_own_hosts(sshd: SshdServer, tmp_path: Path, sig: signal.Signals) -> None:
    slow = interpreter(tmp_path / "bin", "slow", "import time; time.sleep(60)")
    # hosts are dealt in turn: worker 0 gets fast01..fast04, worker 1 slow01..slow04
    hosts: dict[str, dict[str, Any]] = {}
    for i in range(1, 5):
        hosts[f"fast{i:02d}"] = {}
        hosts[f"slow{i:02d}"] = {"ansible_python_interpreter": str(slow)}
    inv = _inventory(sshd, tmp_path / "fleet.yml", hosts)
    cli = Cli.create(tmp_path)
    run_dir = tmp_path / "run"
    proc = cli.start("run", "-i", inv, "-o", str(run_dir), "--probe", "host", "-f", "8", "-t", "40",
                     "--procs", "2", "--format", "json", *_ssh(sshd))
    try:
        wait_for(lambda: _raw_done(run_dir, [n for n in hosts if n.startswith("fast")]), 60, "the fast hosts")
        # worker 0 has reported its hosts and ended; the one left holds the slow hosts in flight
        wait_for(lambda: len([p for p in _workers(proc.pid) if _alive(p)]) == 1, 20, "one worker left")
        [victim] = [p for p in _workers(proc.pid) if _alive(p)]
        os.kill(victim, sig)
        out, err = proc.communicate(timeout=60)
    finally:
        stop(proc)
    assert proc.returncode not in (70, 130), err
    assert "Traceback" not in err
    assert [r["name"] for r in json.loads(out)["hosts"]] == list(hosts)  # the whole fleet shown
    fleet = load_fleet(run_dir)
    assert [r["name"] for r in fleet["hosts"]] == list(hosts)
    for name in hosts:
        rec = host_record(fleet, name)
        if name.startswith("fast"):
            assert rec["outcome"] == "ok", rec["reason"]
        else:
            assert rec["outcome"] == "failed", rec
            assert f"its worker process (pid {victim}) was killed by {sig.name}" in rec["reason"], rec["reason"]
            assert "None" not in rec["reason"]
    assert (run_dir / "fleet.json").exists() and not list(run_dir.glob(".verdict-*"))


@pytest.mark.slow  # spawned interpreters importing Paramiko and Fabric: seconds each
@pytest.mark.parametrize("how", ["sigint-parent", "sigterm-parent", "ctrl-c-group"])
def test_stopping_the_parent_stops_every_worker(sshd: SshdServer, tmp_path: Path, how: str) -> None:
    slow = interpreter(tmp_path / "bin", "slow", "import time; time.sleep(60)")
    # one host at a time per worker: each finishes a fast host, is cut off in a slow one, never starts two
    names = ["fast01", "fast02", "slow01", "slow02", "slow03", "slow04"]
    inv = _inventory(sshd, tmp_path / "fleet.yml",
                     {n: {} if n.startswith("fast") else {"ansible_python_interpreter": str(slow)} for n in names})
    cli = Cli.create(tmp_path)
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(cli.argv("run", "-i", inv, "-o", str(run_dir), "--probe", "host", "-f", "2", "-t", "40",
                                     "--procs", "2", *_ssh(sshd)),
                            env=cli.env(), cwd=str(cli.home), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: _raw_done(run_dir, ["fast01", "fast02"]), 60, "the fast hosts")
        workers = _workers(proc.pid)
        assert len(workers) == 2, workers
        time.sleep(1.0)  # slow01 and slow02 are in their probes
        if how == "ctrl-c-group":  # a terminal's Ctrl-C reaches the workers too
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGINT if how == "sigint-parent" else signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        stop(proc)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert "interrupted: 2 of 6 host(s) finished, 2 cut off part-way, 2 never started" in err
    assert not [p for p in workers if _alive(p)], "no worker outlives the run"
    fleet = load_fleet(run_dir)
    assert [r["name"] for r in fleet["hosts"]] == names
    assert [host_record(fleet, n)["outcome"] for n in names] == ["ok", "ok", "interrupted", "interrupted",
                                                                   "skipped", "skipped"]
    for n in ("slow03", "slow04"):
        assert host_record(fleet, n)["reason"] == "run interrupted before this host started"


@pytest.mark.slow  # spawned interpreters importing Paramiko and Fabric: seconds each
def test_accept_new_from_two_processes_records_every_key_once(sshd: SshdServer, tmp_path: Path) -> None:
    n = min(12, len(sshd.addresses))
    if n < 4:
        pytest.fail(f"needs several loopback addresses, got {sshd.addresses}")
    names = [f"node{i:02d}" for i in range(1, n + 1)]
    inv = _inventory(sshd, tmp_path / "fleet.yml", {name: {} for name in names}, known_hosts=False)
    cli = Cli.create(tmp_path)
    known = cli.home / ".ssh" / "known_hosts"
    known.write_text("")
    proc, fleet = cli.run_json("run", "-i", inv, "--probe", "host", "-f", str(n), "--procs", "2",
                               "--host-key-policy", "accept-new", "--known-hosts", str(known), *_ssh(sshd))
    assert proc.returncode in (0, 1), proc.stderr
    assert all(r["outcome"] == "ok" for r in fleet["hosts"]), [(r["name"], r["reason"]) for r in fleet["hosts"]]
    lines = known.read_text().splitlines()
    host_key = sshd.keys.public(sshd.keys.host_key).split()
    want = sorted(f"[{a}]:{sshd.port} {host_key[0]} {host_key[1]}" for a in sshd.addresses[:n])
    assert sorted(lines) == want  # every address once, each line whole


@pytest.mark.parametrize("value", ["0", "-3", "two", "1.5"])
def test_a_bad_procs_is_one_usage_line(value: str) -> None:
    res = run_cli(["run", "--procs", value, "--probe", "host"])
    assert res.code == 2, res.stderr
    assert "--procs" in res.one_line_error()
