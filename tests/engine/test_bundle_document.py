"""A bundle's document (probe bundle's output on a host) read back: what a host or a half-written
file can put in it is one DocumentError with a message, never another exception."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from typing import Any

import pytest

from orchestrator.engine import bundle
from orchestrator.engine.outcomes import Outcome
from orchestrator.engine.runner import NOT_STARTED_REASON, ProbeCall, document_result, document_script
from orchestrator.inventory.model import Host


def _doc(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "fleetprobe_bundle": 1, "identity": {"hostname": "gpu01", "node_name": "n1"}, "for_host": None,
        "plan": {"playbook": "audit"},
        "calls": [{"name": "host", "args": {}, "timeout_s": 60.0}, {"name": "nvml", "args": {}, "timeout_s": 60.0}],
        "probes": [
            {"probe": "host", "state": "ran", "exit": 0, "timed_out": False, "out_trunc": False, "err_trunc": False,
             "duration_s": 0.1, "stdout": {"text": "{}"}, "stderr": {"text": ""}},
            {"probe": "nvml", "state": "not_started", "stdout": {"text": ""}, "stderr": {"text": ""}}],
    }
    doc.update(over)
    return doc


def _bytes(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def test_a_document_reads_back_with_its_frames() -> None:
    raw = _doc()
    raw["probes"][0]["stderr"] = {"base64": base64.b64encode(b"\xff\xfe noise").decode()}
    doc = bundle.read_document(_bytes(raw))
    assert doc.name == "n1"  # the scheduler's node name before the hostname
    assert [f.probe for f in doc.frames] == ["host", "nvml"]
    assert doc.frames[0].result is not None and doc.frames[0].result.stderr == b"\xff\xfe noise"
    assert not doc.frames[1].started
    assert bundle.looks_like_document(_bytes(raw))
    res = document_result(Host("n1"), doc, 1 << 20)
    assert res.probes["nvml"].outcome == Outcome.TIMEOUT and res.probes["nvml"].reason == NOT_STARTED_REASON
    assert res.probes["host"].outcome == Outcome.INVALID_OUTPUT  # "{}" is no envelope, as over SSH


@pytest.mark.parametrize("data", [
    b"", b"python3: command not found\n", b"[1, 2]", b'{"something": 1}',
    _bytes(_doc(fleetprobe_bundle=2)), _bytes(_doc(identity={})), _bytes(_doc(identity={"hostname": 7})),
    _bytes(_doc(calls=[])), _bytes(_doc(calls="x")),
    _bytes(_doc(calls=[{"name": "host", "timeout_s": "soon"}, {"name": "nvml", "timeout_s": 1}])),
    _bytes(_doc(probes=[{"probe": "host", "state": "ran", "exit": "0", "stdout": {"text": ""}, "stderr": {"text": ""}},
                        {"probe": "nvml", "state": "not_started", "stdout": {"text": ""}, "stderr": {"text": ""}}])),
    _bytes(_doc(probes=[{"probe": "nvml", "state": "not_started", "stdout": {"text": ""}, "stderr": {"text": ""}},
                        {"probe": "host", "state": "not_started", "stdout": {"text": ""}, "stderr": {"text": ""}}])),
    _bytes(_doc(probes=[{"probe": "host", "state": "not_started", "stdout": {"base64": "!!"}, "stderr": {"text": ""}},
                        {"probe": "nvml", "state": "not_started", "stdout": {"text": ""}, "stderr": {"text": ""}}])),
    _bytes(_doc())[:300],
    b'{"fleetprobe_bundle": ' + b"[" * 100_000,  # nesting deeper than json's recursion: no RecursionError
], ids=lambda d: d[:30].decode("utf-8", "replace"))
def test_what_is_not_a_document_is_one_clear_error(data: bytes) -> None:
    with pytest.raises(bundle.DocumentError) as e:
        bundle.read_document(data)
    assert str(e.value)


def test_the_document_script_runs_and_prints_one_document() -> None:
    script = document_script(None, [ProbeCall("host", {}, 30.0)], {"playbook": None}, 1 << 20, 1 << 16)
    proc = subprocess.run([sys.executable, "-I", "-S", "-"], input=script, capture_output=True, timeout=60,
                          check=True, env={"SLURMD_NODENAME": "c7", "SECRET_TOKEN": "x"})
    assert proc.stdout.count(b"\n") == 1  # one line: one document
    doc = bundle.read_document(proc.stdout)
    assert doc.name == "c7" and doc.for_host is None
    assert "SECRET_TOKEN" not in proc.stdout.decode() and set(doc.identity) == {"hostname", "node_name"}
    assert doc.frames[0].result is not None and doc.frames[0].result.exit_code == 0
    assert json.loads(doc.frames[0].result.stdout)["probe"] == "host"
