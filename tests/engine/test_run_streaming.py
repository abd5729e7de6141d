"""A run keeps each host's envelopes on disk, not in memory: written as the host finishes, their
data dropped, read back when the host is judged."""

from __future__ import annotations

import json
import os
import threading
import tracemalloc
from pathlib import Path

import pytest

from orchestrator.api.session import _StoreOrStop
from orchestrator.engine.envelope import Envelope
from orchestrator.engine.outcomes import Outcome
from orchestrator.engine.runner import HostResult, ProbeResult
from orchestrator.inventory.model import Host
from orchestrator.store.rundir import (
    STORED_ENVELOPE_MAX,
    RunDirectory,
    host_input_from_result,
    read_envelope_data,
)
from orchestrator.store.runmeta import RunMeta
from orchestrator.verdict.expectations import Expectations
from orchestrator.verdict.judge import host_record, judge_host

ROOT = Path(__file__).resolve().parents[2]
RECORDING = ROOT / "orchestrator" / "demo" / "recordings" / "dgx-h100-05"


def _result() -> HostResult:
    probes = {}
    for path in sorted(RECORDING.glob("*.json")):
        env = json.loads(path.read_text())
        probes[env["probe"]] = ProbeResult(env["probe"], Outcome.OK, envelope=Envelope(
            probe=env["probe"], probe_version=env["probe_version"], status=env["status"], data=env["data"],
            warnings=env.get("warnings", [])))
    probes["p2p"] = ProbeResult("p2p", Outcome.TIMEOUT, "probe deadline passed")  # no envelope at all
    return HostResult(Host("gpu-7", {"ansible_host": "10.0.0.7", "probe_expect": {"gpu_count": 8}}, ["all", "gpu"]),
                      probes)


def test_stored_hosts_are_judged_from_their_raw_files(tmp_path: Path) -> None:
    in_memory = host_input_from_result(_result())
    expected_record, expected_verdict = judge_host(in_memory, Expectations(gpu_count=8))

    res = _result()
    writer = RunDirectory.create(tmp_path, RunMeta(hosts_order=["gpu-7"]))
    store = _StoreOrStop(writer, threading.Event())
    store.host_finished(res)
    assert store.error is None
    assert all(r.envelope is None or r.envelope.data == {} for r in res.probes.values()), "data released"
    assert res.probes["host"].envelope is not None and res.probes["host"].envelope.probe_version  # summaries kept

    stored = host_input_from_result(res, writer.dir)
    assert stored.data == {} and stored.load_data is not None
    assert stored.load_data() == in_memory.data
    record, verdict = judge_host(stored, Expectations(gpu_count=8))
    assert record == expected_record
    assert [f.to_dict() for f in verdict.findings] == [f.to_dict() for f in expected_verdict.findings]
    assert any(f.id == "gpu.count.mismatch" for f in verdict.findings)  # dgx-h100-05 lost a GPU


def test_unreadable_stored_data_is_a_malformed_data_note_not_a_crash(tmp_path: Path) -> None:
    res = _result()
    writer = RunDirectory.create(tmp_path, RunMeta())
    _StoreOrStop(writer, threading.Event()).host_finished(res)
    (writer.dir / "raw" / "gpu-7" / "nvml.json").write_text("{ cut short")
    record = host_record(host_input_from_result(res, writer.dir))
    assert any("could not be read back" in e for e in record["normalize_errors"])
    assert record["facts"] == {}


def test_an_answered_probes_raw_file_gone_or_not_a_file_is_said_not_skipped(tmp_path: Path) -> None:
    """A probe that answered has a raw file; one deleted, or replaced by a FIFO, must not leave its
    host judged as if the probe had never been asked.  A probe that never answered (p2p here, its
    deadline passed) has no file, and nothing is said of it."""
    res = _result()
    writer = RunDirectory.create(tmp_path, RunMeta())
    _StoreOrStop(writer, threading.Event()).host_finished(res)
    hdir = writer.dir / "raw" / "gpu-7"
    (hdir / "pcie.json").unlink()
    (hdir / "nvml.json").unlink()
    os.mkfifo(hdir / "nvml.json")
    record = host_record(host_input_from_result(res, writer.dir))
    notes = [e for e in record["normalize_errors"] if "could not be read back" in e]
    assert sorted(notes) == [f"stored probe data could not be read back ({p}.json is missing or not a regular file)"
                             for p in ("nvml", "pcie")]
    assert "gpus" not in record["facts"] and "pcie" not in record["facts"]
    assert "nvlink" in record["facts"]  # the files still there are judged
    assert record["probes"]["p2p"]["outcome"] == "timeout"


def test_a_stored_envelope_larger_than_any_written_here_is_refused_unread(tmp_path: Path) -> None:
    """A raw file past STORED_ENVELOPE_MAX (a run directory tampered with, or a disk error's
    garbage) costs the host it belongs to a note, not the judging worker gigabytes of memory."""
    res = _result()
    writer = RunDirectory.create(tmp_path, RunMeta())
    _StoreOrStop(writer, threading.Event()).host_finished(res)
    huge = writer.dir / "raw" / "gpu-7" / "nvml.json"
    with huge.open("r+b") as f:  # sparse: no disk is used for it
        f.truncate(STORED_ENVELOPE_MAX + 1)
    tracemalloc.start()
    try:
        record = host_record(host_input_from_result(res, writer.dir))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, peak
    notes = [e for e in record["normalize_errors"] if "could not be read back" in e]
    assert notes and "nvml.json" in notes[0] and f"over the {STORED_ENVELOPE_MAX:,}" in notes[0], notes
    assert record["facts"] == {}
    with pytest.raises(ValueError, match=r"^nvml\.json: .* bytes, over the "):
        read_envelope_data(huge.parent, ["host", "nvml"])


def test_a_failed_write_keeps_the_data_in_memory(tmp_path: Path) -> None:
    res = _result()
    writer = RunDirectory.create(tmp_path, RunMeta())
    (writer.dir / "raw").write_text("not a directory")  # every host write fails
    store = _StoreOrStop(writer, threading.Event())
    store.host_finished(res)
    assert store.error is not None and store.stop.is_set()
    assert res.probes["nvml"].envelope is not None and res.probes["nvml"].envelope.data
