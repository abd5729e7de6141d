"""Liveness: a host that never starts the bundle costs one probe timeout, not the sum of all of
them (it used to hold its fork for 110 s at 4 probes and -t 20); a complete answer followed by a
channel the host keeps open is kept (ok, with a warning), not discarded as `timeout`."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.hostile import (
    assert_judged,
    envelope,
    host_record,
    interpreter,
    inventory,
    load_fleet,
    only_run_dir,
    recorded,
    run_cli,
)

PROBES = ("host", "nvml", "nvlink", "pcie")


def _run(tmp_path: Path, hosts: dict[str, dict[str, str]], probes: tuple[str, ...], timeout_s: int) -> tuple:
    inv = inventory(tmp_path / "inv.yml", {"good01": {}, **hosts})
    results = tmp_path / "results"
    args = ["run", "-i", str(inv), "--results", str(results), "-t", str(timeout_s)]
    for p in probes:
        args += ["--probe", p]
    res = run_cli(args, timeout=120)
    return res, load_fleet(only_run_dir(results))


def test_a_host_that_never_starts_the_bundle_times_out_after_one_probe_timeout(tmp_path: Path) -> None:
    hang = interpreter(tmp_path / "bin", "hang", "import time; time.sleep(120)", read_stdin=False)
    res, fleet = _run(tmp_path, {"hang01": {"ansible_python_interpreter": str(hang)}}, PROBES, 4)
    assert res.code == 4, res.stderr
    rec = host_record(fleet, "hang01")
    assert rec["outcome"] == "timeout"
    assert rec["probes"]["host"]["duration_s"] < 4 + 2, rec["probes"]["host"]  # one probe timeout, not 4 x 4 s
    assert res.elapsed < 4 * 4, res.elapsed
    assert_judged(fleet, "good01")


def test_a_complete_answer_then_a_held_channel_is_kept_with_a_warning(tmp_path: Path) -> None:
    full = json.dumps(envelope("host", recorded("dgx-h100-01", "host")["data"]))
    held = interpreter(tmp_path / "bin", "held",
                       f"sys.stdout.write({full!r}); sys.stdout.flush(); import time; time.sleep(120)")
    for probes in (("host",), ("host", "nvml")):  # one command, and a bundle answered by a plain envelope
        work = tmp_path / "-".join(probes)
        work.mkdir()
        res, fleet = _run(work, {"held01": {"ansible_python_interpreter": str(held)}}, probes, 3)
        rec = host_record(fleet, "held01")
        assert rec["probes"]["host"]["outcome"] == "ok", rec["probes"]
        assert "kept the channel open" in rec["probes"]["host"]["reason"]
        assert rec["facts"]["host"]["hostname"] == "dgx-h100-01"
        assert res.elapsed < 20, res.elapsed
        assert_judged(fleet, "good01")
