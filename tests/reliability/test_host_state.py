"""Host state the probes meet in the wild: no python3, Python 2, read-only /tmp, no PCI bus in
sysfs, an NVML library without its driver, a GPU that falls off the bus between two NVML calls.

The real CLI runs the real probes over the local transport; "the host" is this machine with its
environment or its sysfs root arranged for the case.  Each case checks the outcome, the line the
user sees, that a healthy neighbour is complete, and the time taken.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.simulate.fake_nvml import FixtureError, build_fake_nvml
from orchestrator.simulate.sysfs import build_machine
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

NVML_CACHE = Path(os.environ.get("TMPDIR", "/tmp")) / f"fleetprobe-fake-nvml-{os.getuid()}"


def _run(tmp_path: Path, hosts: dict[str, dict[str, Any]], probes: list[str], env: dict[str, str] | None = None,
         timeout_s: float = 20) -> tuple[Any, Path, dict[str, Any]]:
    inv = inventory(tmp_path / "inventory.yml", hosts)
    results = tmp_path / "results"
    args = ["run", "-i", str(inv), "--results", str(results), "-t", str(timeout_s), "--hosts", "all"]  # a row per host
    for p in probes:
        args += ["--probe", p]
    res = run_cli(args, env=env)
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr[-3000:]
    run_dir = only_run_dir(results)
    return res, run_dir, load_fleet(run_dir)


def _table_line(stdout: str, host: str) -> str:
    return next(ln for ln in stdout.splitlines() if ln.startswith(host + " "))


def test_no_python3_on_path_fails_with_a_message_naming_the_interpreter(tmp_path: Path) -> None:
    empty = tmp_path / "emptybin"
    empty.mkdir()
    hosts = {"nopy01": {}, "good01": {"ansible_python_interpreter": sys.executable}}
    res, _, fleet = _run(tmp_path, hosts, ["host"], env=cli_env(PATH=str(empty)))
    rec = host_record(fleet, "nopy01")
    assert rec["outcome"] == "failed"
    assert rec["reason"].startswith("interpreter 'python3' not found on the host")
    assert "ansible_python_interpreter for nopy01" in rec["reason"]
    assert "failed: interpreter 'python3' not found" in _table_line(res.stdout, "nopy01")
    assert res.code == 4 and res.elapsed < 20
    assert_good_host(fleet, "good01")


def test_a_missing_interpreter_path_is_the_same_clear_failure(tmp_path: Path) -> None:
    hosts = {"gone01": {"ansible_python_interpreter": str(tmp_path / "no" / "python3")}, "good01": {}}
    res, _, fleet = _run(tmp_path, hosts, ["host"])
    rec = host_record(fleet, "gone01")
    assert rec["outcome"] == "failed" and "not found on the host" in rec["reason"] and str(tmp_path) in rec["reason"]
    assert res.code == 4
    assert_good_host(fleet, "good01")


def test_python2_as_python3_fails_asking_for_python_3_6(tmp_path: Path) -> None:
    # What CPython 2.7 prints when fed a Python 3 probe on stdin
    py2 = interpreter(tmp_path / "bin", "python2.7", (
        "sys.stderr.write('  File \"<stdin>\", line 41\\n'\n"
        "                 '    print(\"%s\" % x, end=\"\")\\n'\n"
        "                 '                        ^\\n'\n"
        "                 'SyntaxError: invalid syntax\\n')\n"
        "sys.exit(1)"))
    hosts = {"old01": {"ansible_python_interpreter": str(py2)}, "good01": {}}
    res, run_dir, fleet = _run(tmp_path, hosts, ["host"])
    rec = host_record(fleet, "old01")
    assert rec["outcome"] == "failed"
    assert "cannot run the probe (Python 2 or older than 3.6?)" in rec["reason"]
    assert "set ansible_python_interpreter to a Python 3.6+" in rec["reason"]
    assert (run_dir / "raw" / "old01" / "host.stderr").read_bytes().endswith(b"SyntaxError: invalid syntax\n")
    assert res.code == 4
    assert_good_host(fleet, "good01")


@contextlib.contextmanager
def _read_only_dir(path: Path) -> Iterator[Path]:
    """A directory nobody can write: mode 0555 for a normal user; a read-only tmpfs for root
    (root ignores modes).  Skips when neither is possible."""
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        try:
            yield path
        finally:
            path.chmod(0o755)
        return
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "fleetprobe-ro", str(path)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        not_here(f"cannot make a read-only directory as root (mount: {proc.stderr.strip()})")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], capture_output=True)


def test_probes_need_no_writable_tmp_and_write_nothing(tmp_path: Path) -> None:
    machine = build_machine("dgx-h100", tmp_path / "h100")
    hosts = {"ro01": {"probe_root": str(machine)}}
    # 1) a writable TMPDIR and HOME stay empty after every probe has run
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (tmp_path / "a").mkdir()
    _, _, fleet = _run(tmp_path / "a", hosts, ["host", "pcie"], env=cli_env(TMPDIR=str(scratch), HOME=str(scratch)))
    assert host_record(fleet, "ro01")["outcome"] == "ok", host_record(fleet, "ro01")
    assert tree(scratch) == set()
    # 2) a read-only TMPDIR and HOME change nothing
    with _read_only_dir(tmp_path / "ro") as ro:
        (tmp_path / "b").mkdir()
        res, _, fleet = _run(tmp_path / "b", hosts, ["host", "pcie"], env=cli_env(TMPDIR=str(ro), HOME=str(ro)))
        rec = host_record(fleet, "ro01")
        assert rec["outcome"] == "ok", rec
        assert rec["facts"]["pcie"] and rec["facts"]["host"]["hostname"]
        assert res.code in (0, 1)


def test_no_pci_bus_in_sysfs_is_unsupported_not_a_crash(tmp_path: Path) -> None:
    bare = tmp_path / "bare-root"
    (bare / "sys").mkdir(parents=True)  # a /sys without bus/pci, as in some containers
    hosts = {"nopci01": {"probe_root": str(bare)}, "good01": {"probe_root": str(build_machine("dgx-a100", tmp_path / "a"))}}
    res, _, fleet = _run(tmp_path, hosts, ["pcie"])
    rec = host_record(fleet, "nopci01")
    assert rec["outcome"] == "unsupported"
    assert rec["reason"].startswith("no PCI bus in sysfs (") and str(bare) in rec["reason"]
    assert "unsupported: no PCI bus in sysfs" in _table_line(res.stdout, "nopci01")
    good = host_record(fleet, "good01")
    assert good["outcome"] == "ok" and len(good["facts"]["pcie"]["gpus"]) == 8
    assert res.code in (0, 1)  # unsupported is not a host failure
    assert res.elapsed < 30


def _fake_nvml(machine: str) -> Path:
    try:
        return build_fake_nvml(machine, NVML_CACHE)
    except FixtureError as e:
        pytest.skip(str(e))


def test_nvml_library_present_but_driver_not_loaded_is_unsupported(tmp_path: Path) -> None:
    hosts = {
        "nodrv01": {"probe_args": {"nvml": {"lib": str(_fake_nvml("dgx-h100--driver-not-loaded"))},
                                   "nvlink": {"lib": str(_fake_nvml("dgx-h100--driver-not-loaded"))}}},
        "good01": {"probe_args": {"nvml": {"lib": str(_fake_nvml("dgx-h100"))},
                                  "nvlink": {"lib": str(_fake_nvml("dgx-h100"))}}},
    }
    res, _, fleet = _run(tmp_path, hosts, ["nvml", "nvlink"])
    rec = host_record(fleet, "nodrv01")
    for probe in ("nvml", "nvlink"):
        assert rec["probes"][probe]["outcome"] == "unsupported"
        assert rec["probes"][probe]["reason"] == "nvmlInit failed: DRIVER_NOT_LOADED"
    assert "unsupported: nvmlInit failed: DRIVER_NOT_LOADED" in _table_line(res.stdout, "nodrv01")
    good = host_record(fleet, "good01")
    assert good["outcome"] == "ok" and len(good["facts"]["gpus"]["list"]) == 8
    assert res.code in (0, 1) and res.elapsed < 30


def test_gpu_lost_between_nvml_calls_is_reported_and_the_rest_kept(tmp_path: Path) -> None:
    hosts = {"lost01": {"probe_args": {"nvml": {"lib": str(_fake_nvml("dgx-a100--gpu-lost"))}}},
             "good01": {"probe_args": {"nvml": {"lib": str(_fake_nvml("dgx-a100"))}}}}
    res, _, fleet = _run(tmp_path, hosts, ["nvml"])
    rec = host_record(fleet, "lost01")
    assert rec["probes"]["nvml"]["outcome"] == "ok"  # the probe finished; one GPU did not answer
    gpus = rec["facts"]["gpus"]["list"]
    assert len(gpus) == 8  # the lost GPU is still listed, by bus id
    lost = [g for g in gpus if g.get("lost")]
    assert [g["bus_id"] for g in lost] == ["0000:90:00.0"]
    healthy = [g for g in gpus if not g.get("lost")]
    assert len(healthy) == 7 and all(g["name"] == "NVIDIA A100-SXM4-80GB" for g in healthy)
    ids = {f["id"] for f in fleet["findings"] if f["host"] == "lost01" and f["severity"] in ("fail", "warn")}
    assert any("lost" in i for i in ids), ids
    assert res.code in (1, 5)  # a lost GPU is a fail finding
    good = host_record(fleet, "good01")
    assert good["outcome"] == "ok" and not any(g.get("lost") for g in good["facts"]["gpus"]["list"])
    assert res.elapsed < 30
