"""The controller under stress: interrupted mid-run, results disk read-only or full, two runs on one
results directory, shell metacharacters in the inventory, YAML built to hurt.

The real CLI runs as a subprocess, against the real sshd fixture or the local transport.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.hostile import (
    assert_good_host,
    cli_env,
    host_record,
    interpreter,
    inventory,
    load_fleet,
    only_run_dir,
    run_cli,
    tree,
)
from tests.support.skips import not_here
from tests.support.sshd import ROOT_DIR, SshdServer


def _wait_for(pred: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _ssh_args(sshd: SshdServer) -> list[str]:
    return ["--ssh-config", str(sshd.ssh_config), "--known-hosts", str(sshd.known_hosts)]


def _ssh_host(sshd: SshdServer, **vars: Any) -> dict[str, Any]:
    h = sshd.host("x", **vars)
    return {"ansible_connection": "ssh", **h.vars}


# ---------------------------------------------------------------------------------------------
# Ctrl-C and SIGTERM


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_keeps_every_finished_host_and_leaves_a_readable_partial_run(
        tmp_path: Path, sshd: SshdServer, sig: signal.Signals) -> None:
    slow = interpreter(tmp_path / "bin", "slow", "import time; time.sleep(60)")
    hosts = {f"fast{i:02d}": _ssh_host(sshd) for i in range(1, 4)}
    hosts.update({f"slow{i:02d}": _ssh_host(sshd, ansible_python_interpreter=str(slow)) for i in range(1, 3)})
    inv = inventory(tmp_path / "inventory.yml", hosts)
    results = tmp_path / "results"
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "run", "-i", str(inv), "--probe", "host", "--results", str(results),
         "-t", "60", *_ssh_args(sshd)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env(), cwd=str(ROOT_DIR), stdin=subprocess.DEVNULL)
    try:
        def fast_done() -> bool:
            runs = [p for p in results.glob("*/raw")]
            return bool(runs) and all((runs[0] / f"fast{i:02d}" / "_host.json").is_file() for i in range(1, 4))
        _wait_for(fast_done, 30, "the fast hosts to finish")
        t0 = time.monotonic()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
        stopped_in = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = err.decode()
    assert proc.returncode == 130, stderr
    assert b"Traceback" not in out
    assert stopped_in < 15, stopped_in  # closing the connections ends the slow probes at once
    run_dir = only_run_dir(results)
    # 3 finished, 2 cut off in their probe, none left unstarted: the message counts each kind
    assert f"interrupted: 3 of 5 host(s) finished, 2 cut off part-way, 0 never started; results kept in {run_dir}" \
        in stderr
    assert "Traceback" not in stderr
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["state"] == "interrupted" and meta["finished"]
    fleet = load_fleet(run_dir)
    for i in range(1, 4):
        rec = host_record(fleet, f"fast{i:02d}")
        assert rec["outcome"] == "ok" and rec["facts"]["host"]["kernel"] == os.uname().release
        assert (run_dir / "raw" / f"fast{i:02d}" / "host.json").is_file()
    for i in range(1, 3):
        rec = host_record(fleet, f"slow{i:02d}")
        assert rec["outcome"] == "interrupted" and rec["reason"] == "run interrupted while this host was being probed"
    if sig == signal.SIGTERM:
        return  # the run directory is the same whichever signal ended it: read it back once
    # the partial run is an ordinary stored run: listed, shown, re-judged
    shown = run_cli(["show", run_dir.name, "--results", str(results), "--hosts", "all"])  # healthy rows too
    assert shown.code in (0, 1) and "fast01" in shown.stdout and "slow01" in shown.stdout, shown.stderr
    listed = run_cli(["runs", "--results", str(results)])
    assert listed.code == 0 and run_dir.name in listed.stdout
    rejudged = run_cli(["rejudge", run_dir.name, "--results", str(results)])
    assert rejudged.code in (0, 1), rejudged.stderr
    # the lock was released: the next run starts
    assert not (results / ".fleetprobe.lock").read_text().strip()


def test_interrupt_on_the_local_transport_keeps_finished_hosts(tmp_path: Path) -> None:
    slow = interpreter(tmp_path / "bin", "slow", "import time; time.sleep(60)")
    inv = inventory(tmp_path / "inventory.yml",
                    {"fast01": {}, "fast02": {}, "slow01": {"ansible_python_interpreter": str(slow)}})
    results = tmp_path / "results"
    deadline_s = 6
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "run", "-i", str(inv), "--probe", "host", "--results", str(results),
         "-t", str(deadline_s)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env(), cwd=str(ROOT_DIR), stdin=subprocess.DEVNULL)
    try:
        _wait_for(lambda: len(list(results.glob("*/raw/fast0*/_host.json"))) == 2, 30, "the fast hosts")
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        stopped_in = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err.decode()
    # a local probe in flight is ended at the latest by its own deadline (see docs/reliability.md)
    assert stopped_in < deadline_s + 5, stopped_in
    fleet = load_fleet(only_run_dir(results))
    assert_good_host(fleet, "fast01")
    assert_good_host(fleet, "fast02")
    assert host_record(fleet, "slow01")["outcome"] == "interrupted"  # started, then cut off: not "skipped"


# ---------------------------------------------------------------------------------------------
# Results directory read-only or full


@contextlib.contextmanager
def _tmpfs(path: Path, options: str) -> Iterator[Path]:
    path.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "fleetprobe-test", str(path)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        not_here(f"cannot mount a tmpfs ({proc.stderr.strip() or 'mount failed'}); needs root")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


@contextlib.contextmanager
def _read_only(path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:  # a normal user cannot write a 0555 directory; root can, so root mounts
        path.mkdir()
        path.chmod(0o555)
        try:
            yield path
        finally:
            path.chmod(0o755)
        return
    with _tmpfs(path, "ro,size=64k") as p:
        yield p


def test_read_only_results_directory_is_a_clear_usage_error(tmp_path: Path) -> None:
    inv = inventory(tmp_path / "inventory.yml", {"good01": {}})
    with _read_only(tmp_path / "ro") as ro:
        res = run_cli(["run", "-i", str(inv), "--probe", "host", "--results", str(ro / "runs")])
        assert res.code == 2
        msg = res.one_line_error()
        assert msg.startswith(f"probe: error: cannot use the results directory {ro / 'runs'}: ")
        assert "Read-only file system" in msg or "Permission denied" in msg
        assert "choose another with --results" in msg
        assert tree(ro) == set()
        assert res.elapsed < 15


def test_results_disk_full_is_a_clear_error_and_leaves_no_corrupt_run(tmp_path: Path) -> None:
    # The run directory fits; one host's answer does not.  The big answer is a valid envelope.
    bin_ = tmp_path / "bin"
    # 600 KiB in strings under the 64 KiB a string value may hold (a longer one is cut when parsed)
    pad = ["x" * (60 * 1024)] * 10
    big = interpreter(bin_, "big", (
        "src = sys.stdin.buffer.read()\n"
        "print(json.dumps({'envelope_version': 1, 'probe': 'host', 'probe_version': '1.0', 'status': 'ok',"
        f" 'data': {{'hostname': 'big', 'pad': {pad!r}}}, 'errors': [], 'warnings': [], 'duration_s': 0.1}}))"))
    inv = inventory(tmp_path / "inventory.yml", {"good01": {}, "big01": {"ansible_python_interpreter": str(big)}})
    with _tmpfs(tmp_path / "full", "size=256k") as full:
        res = run_cli(["run", "-i", str(inv), "--probe", "host", "--results", str(full)])
        assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr
        assert res.code == 73, res.stderr  # EX_CANTCREAT: the results could not be written
        msg = res.one_line_error()
        assert "No space left on device" in msg and "results" in msg, msg
        run_dir = only_run_dir(full)
        # whatever is there parses: no half-written JSON, no temp files left behind
        leftovers = [p for p in run_dir.rglob(".*.tmp")]
        assert leftovers == []
        for p in run_dir.rglob("*.json"):
            json.loads(p.read_text())
        meta = json.loads((run_dir / "run.json").read_text())
        assert meta["state"] in ("running", "failed")
        assert res.elapsed < 20


# ---------------------------------------------------------------------------------------------
# Two runs on one results directory


def test_second_run_on_the_same_results_directory_exits_75_naming_the_holder(tmp_path: Path) -> None:
    slow = interpreter(tmp_path / "bin", "slow", "import time; time.sleep(3)")
    inv = inventory(tmp_path / "inventory.yml", {"slow01": {"ansible_python_interpreter": str(slow)}})
    results = tmp_path / "results"
    first = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "run", "-i", str(inv), "--probe", "host", "--results", str(results),
         "-t", "20"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=cli_env(), cwd=str(ROOT_DIR))
    try:
        _wait_for(lambda: any(results.glob("*/run.json")), 20, "the first run to start")
        good = inventory(tmp_path / "inv2.yml", {"good01": {}})
        second = run_cli(["run", "-i", str(good), "--probe", "host", "--results", str(results)])
        assert second.code == 75
        msg = second.one_line_error()
        assert msg.startswith(f"probe: another fleetprobe run holds {results / '.fleetprobe.lock'} (pid {first.pid}")
        assert "this run did not start" in msg
        assert second.elapsed < 10
        assert len([p for p in results.iterdir() if p.is_dir()]) == 1  # the loser wrote nothing
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 4
    # once the holder is gone the lock is free again
    third = run_cli(["run", "-i", str(good), "--probe", "host", "--results", str(results)])
    assert third.code in (0, 1), third.stderr


# ---------------------------------------------------------------------------------------------
# Shell metacharacters


def test_shell_metacharacters_in_the_inventory_never_run(tmp_path: Path, sshd: SshdServer) -> None:
    marker = tmp_path / "pwned-X"
    cmd = f"touch {marker}"
    payloads = [f"$({cmd})", f"`{cmd}`", f"; {cmd}", f"'; {cmd}; '", f"\"|| {cmd} && \""]
    hosts: dict[str, dict[str, Any]] = {"good01": {}, "sshgood01": _ssh_host(sshd)}
    for i, p in enumerate(payloads):
        hosts[f"name{i}{p}"] = {}  # host names (local: the name is never part of a command)
        hosts[f"sshname{i}{p}"] = _ssh_host(sshd)
        hosts[f"interp{i}"] = {"ansible_python_interpreter": f"python3 {p}"}
        hosts[f"interpq{i}"] = {"ansible_python_interpreter": f"python3{p}"}
        hosts[f"sshinterp{i}"] = _ssh_host(sshd, ansible_python_interpreter=f"python3 {p}")
        hosts[f"addr{i}"] = _ssh_host(sshd, ansible_host=f"127.0.0.1{p}")
        hosts[f"user{i}"] = _ssh_host(sshd, ansible_user=f"{sshd.user}{p}")
        hosts[f"args{i}"] = {"probe_root": f"/{p}", "probe_args": {"host": {"x": p, p: [p]}}}
        hosts[f"sshargs{i}"] = _ssh_host(sshd, probe_args={"host": {"root": f"/{p}"}})
    inv = inventory(tmp_path / "inventory.yml", hosts)
    results = tmp_path / "results"
    res = run_cli(["run", "-i", str(inv), "--probe", "host", "--results", str(results), "-t", "20",
                   "--connect-timeout", "5", "--retries", "0", *_ssh_args(sshd)], timeout=120)
    assert "Traceback" not in res.stderr, res.stderr
    time.sleep(0.2)  # anything spawned would have run by now
    assert not marker.exists(), "a shell metacharacter in the inventory ran a command"
    fleet = load_fleet(only_run_dir(results))
    assert len(fleet["hosts"]) == len(hosts)
    assert_good_host(fleet, "good01")
    assert_good_host(fleet, "sshgood01")
    for i, p in enumerate(payloads):
        # names are data: the probe runs exactly as for good01
        assert host_record(fleet, f"name{i}{p}")["outcome"] == "ok"
        assert host_record(fleet, f"sshname{i}{p}")["outcome"] == "ok"
        # an interpreter "python3 <payload>" is python3 given an odd argument: never a shell line
        for name in (f"interp{i}", f"interpq{i}", f"sshinterp{i}"):
            assert host_record(fleet, name)["outcome"] in ("failed", "invalid_output"), name
        assert host_record(fleet, f"addr{i}")["outcome"] in ("unreachable", "failed")
        assert host_record(fleet, f"user{i}")["outcome"] in ("unreachable", "failed")
        # probe arguments travel as JSON data; a root that does not exist is simply empty
        assert host_record(fleet, f"args{i}")["probes"]["host"]["outcome"] in ("ok", "failed", "unsupported")
    assert res.elapsed < 100


# ---------------------------------------------------------------------------------------------
# YAML built to hurt

_BOMB = """\
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


def _indented(text: str, spaces: int) -> str:
    return "".join(" " * spaces + line + "\n" for line in text.splitlines())


def _inventories(marker: Path) -> dict[str, str]:
    return {
        # nine levels of nine aliases: 9**9 (387 million) strings once expanded
        "bomb": "all:\n  vars:\n" + _indented(_BOMB, 4)
                + "  hosts:\n    h1:\n      ansible_connection: local\n      junk: *i\n",
        "python_tag": f"all:\n  hosts:\n    h1:\n      ansible_connection: local\n"
                      f"      x: !!python/object/apply:os.system [\"touch {marker}\"]\n",
        "python_name": "all:\n  hosts: !!python/name:os.system\n",
        "recursive": "all:\n  hosts:\n    h1: &r\n      ansible_connection: local\n      self: *r\n",
    }


@pytest.mark.parametrize("case", ["bomb", "python_tag", "python_name", "recursive"])
def test_hostile_inventory_yaml_is_refused_in_one_line(tmp_path: Path, case: str) -> None:
    marker = tmp_path / "pwned-yaml"
    inv = tmp_path / "inventory.yml"
    inv.write_text(_inventories(marker)[case])
    results = tmp_path / "results"
    res = run_cli(["run", "-i", str(inv), "--probe", "host", "--results", str(results)], timeout=60,
                  measure_rss=tmp_path / "rss")
    assert res.code == 2, (res.code, res.stderr[-2000:])
    msg = res.one_line_error()
    assert msg.startswith("probe: error: ") and str(inv) in msg, msg
    assert len([ln for ln in res.stderr.splitlines() if ln.strip()]) == 1
    assert not marker.exists()
    assert not results.exists() or tree(results) <= {".fleetprobe.lock"}
    assert res.elapsed < 20 and res.rss_kib is not None and res.rss_kib < 300 * 1024


def _playbooks(marker: Path) -> dict[str, str]:
    probe = "- hosts: all\n  probes:\n    - name: host\n"
    return {
        "bomb": probe + "      args:\n" + _indented(_BOMB, 8) + "        x: *i\n",
        "python_tag": probe + f"      args: {{x: !!python/object/apply:os.system [\"touch {marker}\"]}}\n",
        "recursive": probe + "      args: &r {self: *r}\n",
    }


@pytest.mark.parametrize("case", ["bomb", "python_tag", "recursive"])
def test_hostile_playbook_yaml_is_refused_in_one_line(tmp_path: Path, case: str) -> None:
    marker = tmp_path / "pwned-yaml"
    book = tmp_path / "playbook.yml"
    book.write_text(_playbooks(marker)[case])
    inv = inventory(tmp_path / "inventory.yml", {"good01": {}})
    results = tmp_path / "results"
    res = run_cli(["run", "-i", str(inv), "-p", str(book), "--results", str(results)], timeout=60,
                  measure_rss=tmp_path / "rss")
    assert res.code == 2, (res.code, res.stderr[-2000:])
    msg = res.one_line_error()
    assert msg.startswith("probe: error: ") and str(book) in msg, msg
    assert not marker.exists()
    assert not results.exists() or tree(results) <= {".fleetprobe.lock"}
    assert res.elapsed < 20 and res.rss_kib is not None and res.rss_kib < 300 * 1024
