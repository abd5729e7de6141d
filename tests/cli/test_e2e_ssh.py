"""`probe run` end to end: the real CLI in a subprocess, over the real loopback sshd.

A fleet of 20 hosts, every network and host fault beside good hosts, a half black-holed fleet,
and Ctrl-C / SIGTERM in the middle of a run.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from orchestrator.inventory.model import Host
from orchestrator.store.compact import read_plain
from tests.support import fakes
from tests.support.fleet import HANG, Cli, hosts_by_name, stop, wait_for, write_script
from tests.support.sshd import ROOT_DIR, SshdServer, known_hosts_line

pytestmark = pytest.mark.ssh

SCHEMA = json.loads((ROOT_DIR / "orchestrator" / "schema" / "fleet.schema.json").read_text())


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli.create(tmp_path)


def write_inventory(sshd: SshdServer, hosts: list[Host], path: Path) -> str:
    path.write_text(sshd.inventory_yaml(hosts))
    return str(path)


def ssh_args(sshd: SshdServer) -> list[str]:
    # An empty ssh_config: the developer's ~/.ssh/config must not change what the tests see.
    return ["--ssh-config", str(sshd.ssh_config)]


def nonzero(counts: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in counts.items() if v}


def raw_envelope(run_dir: Path, host: str, probe: str = "host") -> dict[str, Any]:
    return json.loads((run_dir / "raw" / host / f"{probe}.json").read_text())


def test_twenty_hosts_over_real_ssh_give_twenty_correct_rows(sshd: SshdServer, cli: Cli, tmp_path: Path) -> None:
    hosts = sshd.fleet(20)
    inv = write_inventory(sshd, hosts, tmp_path / "fleet.yml")
    run_dir = tmp_path / "run"
    proc, fleet = cli.run_json("run", "-i", inv, "-o", str(run_dir), "--probe", "host", *ssh_args(sshd))

    assert proc.returncode == 0, proc.stderr
    jsonschema.validate(fleet, SCHEMA)
    assert read_plain(run_dir / "fleet.json") == fleet
    assert [h["name"] for h in fleet["hosts"]] == [h.name for h in hosts]
    assert nonzero(fleet["summary"]["outcomes"]) == {"ok": 20}
    seen_servers = set()
    for h, rec in zip(hosts, fleet["hosts"]):
        assert rec["outcome"] == "ok" and rec["reason"] == ""
        assert rec["address"] == h.vars["ansible_host"]
        assert rec["facts"]["host"]["hostname"] == socket.gethostname()
        env = raw_envelope(run_dir, h.name)
        assert env["status"] == "ok" and env["probe"] == "host"
        # SSH_CONNECTION = client_ip client_port server_ip server_port: the probe really ran in a
        # session that came in on this host's own address.
        _client_ip, _cport, server_ip, server_port = env["data"]["ssh_connection"].split()
        assert (server_ip, int(server_port)) == (h.vars["ansible_host"], sshd.port)
        seen_servers.add(server_ip)
    assert seen_servers == set(sshd.addresses[:20])
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["state"] == "complete" and nonzero(meta["summary"]["outcomes"]) == {"ok": 20}


# ------------------------------------------------------------------------------------------ faults

GOOD = ["good01", "good02", "good03"]
# Long enough for a real probe on a busy 2-core CI machine, short enough to wait for the hang once.
PROBE_TIMEOUT = 8
# The connect deadline the faults must wait out; the good hosts beside them log in within it.
CONNECT_TIMEOUT = 3


@pytest.fixture(scope="module")
def fault_run(sshd: SshdServer, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One run holding every fault beside good hosts, judged once; the tests below read it."""
    tmp = tmp_path_factory.mktemp("faults")
    cli = Cli.create(tmp)
    changed_kh = tmp / "changed_known_hosts"
    changed_kh.write_text(known_hosts_line("127.0.0.2" if len(sshd.addresses) > 1 else sshd.address, sshd.port,
                                           sshd.keys.public(sshd.keys.other_host_key)))
    scripts = tmp / "bin"
    scripts.mkdir()
    hang = write_script(scripts / "hang", HANG)
    garbage = write_script(scripts / "garbage", "cat >/dev/null\necho 'Segmentation fault? no: just not JSON'")
    nothing = write_script(scripts / "nothing", "cat >/dev/null\nexit 0")
    with contextlib.ExitStack() as stack:
        closed = stack.enter_context(fakes.closed_port())
        mute = stack.enter_context(fakes.silent())
        a = sshd.addresses
        hosts = [
            *[sshd.host(n, a[i % len(a)]) for i, n in enumerate(GOOD)],
            sshd.host("closed01", ansible_port=closed),
            sshd.host("mute01", ansible_port=mute.port),
            sshd.host("wrongkey01", ansible_ssh_private_key_file=str(sshd.keys.wrong_key)),
            sshd.host("hostkey01", a[1 % len(a)], probe_known_hosts=str(changed_kh)),
            sshd.host("hang01", ansible_python_interpreter=str(hang)),
            sshd.host("garbage01", ansible_python_interpreter=str(garbage)),
            sshd.host("nothing01", ansible_python_interpreter=str(nothing)),
            sshd.host("nopython01", ansible_python_interpreter="/opt/nowhere/bin/python3.99"),
            Host("local01", vars={"ansible_connection": "local"}, groups=["all"]),
        ]
        inv = tmp / "faults.yml"
        inv.write_text(sshd.inventory_yaml(hosts))
        t0 = time.monotonic()
        proc, fleet = cli.run_json("run", "-i", str(inv), "-o", str(tmp / "run"), "--probe", "host",
                                   "--connect-timeout", str(CONNECT_TIMEOUT), "-t", str(PROBE_TIMEOUT), *ssh_args(sshd))
        wall = time.monotonic() - t0
    return proc, fleet, wall, tmp / "run"


def test_fault_run_exit_code_schema_and_good_hosts(fault_run: Any) -> None:
    proc, fleet, _wall, run_dir = fault_run
    assert proc.returncode in (4, 5), proc.stderr  # host problems (5 when fail findings too)
    assert proc.returncode == 4 + (1 if fleet["summary"]["findings"].get("fail") else 0)
    jsonschema.validate(fleet, SCHEMA)
    recs = hosts_by_name(fleet)
    for name in [*GOOD, "local01"]:
        rec = recs[name]
        assert rec["outcome"] == "ok", rec
        assert rec["facts"]["host"]["hostname"] == socket.gethostname()
        assert raw_envelope(run_dir, name)["status"] == "ok"
    # Every good host is untouched by the faults next to it.
    assert {h["name"] for h in fleet["hosts"] if h["outcome"] == "ok"} == {*GOOD, "local01"}


def test_local_connection_runs_without_ssh(fault_run: Any) -> None:
    _proc, fleet, _wall, run_dir = fault_run
    env = raw_envelope(run_dir, "local01")
    assert env["data"]["ssh_connection"] is None  # ran here as a subprocess, not in an SSH session
    assert hosts_by_name(fleet)["local01"]["address"] == "local01"


FAULTS = {
    # host: (outcome, words the one-line reason must contain)
    "closed01": ("unreachable", ["refused"]),
    "mute01": ("unreachable", []),
    "wrongkey01": ("unreachable", ["auth"]),
    "hostkey01": ("unreachable", ["ssh-keygen -R"]),
    "hang01": ("timeout", [f"{PROBE_TIMEOUT}s"]),
    "garbage01": ("invalid_output", []),
    "nothing01": ("invalid_output", []),
    "nopython01": ("failed", ["/opt/nowhere/bin/python3.99"]),
}


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_fault_gets_its_outcome_and_a_one_line_reason(fault_run: Any, name: str) -> None:
    _proc, fleet, _wall, run_dir = fault_run
    outcome, words = FAULTS[name]
    rec = hosts_by_name(fleet)[name]
    assert rec["outcome"] == outcome, rec
    reason = rec["reason"]
    assert reason and "\n" not in reason and "Traceback" not in reason
    for w in words:
        assert w.lower() in reason.lower(), reason
    assert rec["probes"]["host"]["outcome"] == outcome
    assert not (run_dir / "raw" / name / "host.json").exists()  # no envelope was invented


def test_fault_reasons_say_what_happened(fault_run: Any, sshd: SshdServer) -> None:
    _proc, fleet, _wall, run_dir = fault_run
    recs = hosts_by_name(fleet)
    assert "HOST KEY CHANGED" in recs["hostkey01"]["reason"]
    assert f"{CONNECT_TIMEOUT}s" in recs["mute01"]["reason"]  # it waited for the connect deadline, and says so
    assert "interpreter" in recs["nopython01"]["reason"]
    # invalid output keeps the raw bytes for a human to look at
    assert b"not JSON" in (run_dir / "raw" / "garbage01" / "host.stdout").read_bytes()
    assert "nothing" in recs["nothing01"]["reason"]
    assert "refused" in recs["closed01"]["reason"] and "ansible_port" in recs["closed01"]["reason"]


def test_fault_run_does_not_wait_for_the_sum_of_deadlines(fault_run: Any) -> None:
    _proc, fleet, wall, run_dir = fault_run
    recs = hosts_by_name(fleet)
    # The silent listener and the hanging command each held their host up to its deadline ...
    assert json.loads((run_dir / "raw" / "mute01" / "_host.json").read_text())["duration_s"] >= CONNECT_TIMEOUT
    assert recs["hang01"]["probes"]["host"]["duration_s"] >= PROBE_TIMEOUT
    # ... but in parallel: the run ends far below connect deadline + probe timeout per bad host, serially.
    # 8 bad hosts x (connect deadline x (1 + 2 retries) + probe timeout)
    serial = 8 * (CONNECT_TIMEOUT * 3 + PROBE_TIMEOUT)
    assert wall < serial / 2, wall


# ------------------------------------------------------------------------------ black-holed half


def test_half_the_fleet_black_holed_costs_one_connect_deadline(sshd: SshdServer, cli: Cli, tmp_path: Path) -> None:
    n = 8
    connect_timeout = float(CONNECT_TIMEOUT)
    with contextlib.ExitStack() as stack:
        holes = [stack.enter_context(fakes.black_hole()) for _ in range(n)]
        good = sshd.fleet(n, prefix="good")
        dark = [sshd.host(f"dark{i + 1:02d}", ansible_port=port) for i, port in enumerate(holes)]
        inv = write_inventory(sshd, [x for pair in zip(good, dark) for x in pair], tmp_path / "half.yml")
        t0 = time.monotonic()
        proc, fleet = cli.run_json("run", "-i", inv, "-o", str(tmp_path / "run"), "--probe", "host",
                                   "--connect-timeout", str(connect_timeout), *ssh_args(sshd))
        wall = time.monotonic() - t0
    assert proc.returncode == 4, proc.stderr
    recs = hosts_by_name(fleet)
    assert all(recs[h.name]["outcome"] == "ok" for h in good)
    for h in dark:
        assert recs[h.name]["outcome"] == "unreachable"
        assert f"{CONNECT_TIMEOUT}s" in recs[h.name]["reason"] and "\n" not in recs[h.name]["reason"]
    good_time = sum(recs[h.name]["probes"]["host"]["duration_s"] for h in good)
    serial = n * connect_timeout + good_time
    assert wall >= connect_timeout  # the holes really were waited for ...
    assert wall < serial / 2, (wall, serial)  # ... once, in parallel, not one after the other


# -------------------------------------------------------------------------------- interruption


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_keeps_finished_hosts(sshd: SshdServer, cli: Cli, tmp_path: Path, sig: int) -> None:
    hang = write_script(tmp_path / "hang", HANG)
    fast = sshd.fleet(6, prefix="fast")
    slow = [sshd.host(f"slow{i:02d}", ansible_python_interpreter=str(hang)) for i in range(1, 5)]
    inv = write_inventory(sshd, fast + slow, tmp_path / "int.yml")
    run_dir = tmp_path / "run"
    proc = cli.start("run", "-i", inv, "-o", str(run_dir), "--probe", "host", "-t", "60", "--format", "json",
                     *ssh_args(sshd))
    try:
        wait_for(lambda: all((run_dir / "raw" / h.name / "host.json").is_file() for h in fast) or proc.poll() is not None,
                 60, "the fast hosts to finish")
        assert proc.poll() is None, proc.communicate()
        t0 = time.monotonic()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
        stopped = time.monotonic() - t0
    finally:
        stop(proc)
    assert proc.returncode == 130, err
    assert stopped < 15, stopped  # in-flight hosts are ended, not waited for
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["state"] == "interrupted"
    fleet = read_plain(run_dir / "fleet.json")
    assert json.loads(out) == fleet
    jsonschema.validate(fleet, SCHEMA)
    recs = hosts_by_name(fleet)
    for h in fast:
        assert recs[h.name]["outcome"] == "ok"
        assert raw_envelope(run_dir, h.name)["status"] == "ok"
    for h in slow:  # cut off while probing: interrupted (skipped is for hosts never started)
        assert recs[h.name]["outcome"] == "interrupted"
        assert "interrupted" in recs[h.name]["reason"]
    assert "interrupted" in err
