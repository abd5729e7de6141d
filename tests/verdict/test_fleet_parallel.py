"""A fleet judged in worker processes equals the fleet judged in one process, byte for byte.

Inputs are the demo fleet's stored raw files (a real `probe run` of the bundled demo), copied under
new names so identities repeat across hosts: the fleet-wide duplicate checks then have work, and
they only see the facts the workers hand back (checks.FLEET_READS).
"""

from __future__ import annotations

import copy
import gc
import io
import json
import os
import pickle
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api.session import judge
from orchestrator.engine.results import HostInput
from orchestrator.store import atomic
from orchestrator.store.compact import read_plain
from orchestrator.store.spool import SpooledRecords
from orchestrator.verdict import handoff
from orchestrator.verdict import parallel as fleet_workers
from orchestrator.verdict.checks import FLEET_CHECKS, fleet_facts
from orchestrator.verdict.checks.base import HostView
from orchestrator.verdict.expectations import Expectations
from orchestrator.verdict.judge import build_fleet, judge_host
from tests.support.demo_inputs import copies
from tests.support.fabric import synthetic_facts
from tests.support.judged import meta
from tests.verdict.test_verdict_demo import recorded_facts

ROOT = Path(__file__).resolve().parents[2]


def _copies(inputs: list[HostInput], n: int) -> list[HostInput]:
    return copies(inputs, n)


def _expect(h: HostInput) -> Expectations:
    return Expectations(gpu_count=8) if h.name.startswith("dgx") else Expectations()


def _overrides(host: str) -> dict[str, Any]:
    return {}


def _text(fleet: dict[str, Any]) -> str:
    return "".join(atomic.iter_json(fleet))


def test_workers_write_the_same_fleet_json_as_one_process(demo_inputs: list[HostInput], tmp_path: Path) -> None:
    inputs = _copies(demo_inputs, 90)
    run = meta("t")
    serial = build_fleet(run, inputs, _expect, _overrides, workers=1).to_document()
    parallel = build_fleet(run, inputs, _expect, _overrides, spool=tmp_path, workers=3).to_document()
    assert isinstance(serial["hosts"], list)
    assert isinstance(parallel["hosts"], SpooledRecords)
    assert _text(parallel) == _text(serial)
    ids = {f["id"] for f in serial["findings"]}
    assert {"identity.hostname.duplicate", "identity.uuid.duplicate"} <= ids  # the copies collide
    # the records read back one by one, by index and by slice, are the serial ones
    assert len(parallel["hosts"]) == 90
    assert list(parallel["hosts"]) == serial["hosts"]
    assert parallel["hosts"][-1] == serial["hosts"][-1]
    assert parallel["hosts"][10:13] == serial["hosts"][10:13]
    assert parallel["hosts"][0]["class"] and parallel["hosts"][0]["fingerprint"]
    # written through the atomic writer: the same bytes on disk
    a = atomic.write_json(tmp_path / "serial.json", serial)
    b = atomic.write_json(tmp_path / "parallel.json", parallel)
    assert a.read_bytes() == b.read_bytes()
    assert json.loads(b.read_text())["hosts"][5] == serial["hosts"][5]


def _every_fleet_check_has_work(facts_of: list[dict[str, Any]], names: list[str]) -> None:
    """Change a few hosts (in place) so each fleet check finds something: a version that differs
    from its peers' in every field compared, an HCA firmware outlier, an NVLink domain whose
    cliques disagree, NCCL boxes judged against their peers (one slow), a fabric qualification over
    six of them with one slow HCA."""
    h100 = [f for f in facts_of if (f.get("host") or {}).get("board", {}).get("product") == "DGXH100"
            and (f.get("gpus") or {}).get("list") and (f.get("nic") or {}).get("devices")]
    odd = h100[0]
    odd["host"]["kernel"] = "6.99.0-odd"
    odd["host"]["driver"]["version"] = "999.1.1"
    odd["host"]["board"]["bios_version"] = "0.0.1-odd"
    odd["gpus"]["cuda_driver_version"] = "99.9"
    for g in odd["gpus"]["list"]:
        g["vbios"] = "00.00.00.00.00"
    odd["nic"]["devices"][0]["fw_ver"] = "1.2.3-odd"
    for i, f in enumerate(h100[1:6]):
        for g in f["gpus"]["list"]:
            g["fabric"] = {**g["fabric"], "state": "completed", "cluster_uuid": "ab" * 16, "clique_id": 2 if i == 0 else 1}
    measured = recorded_facts("dgx-h100-12")["nccl"]  # the default play has no NCCL probe: a recording's
    for i, f in enumerate(h100[6:10]):
        f["nccl"] = {**copy.deepcopy(measured), "gpu_model": "L40S"}  # no published floor: judged by peers
        for r in f["nccl"]["results"]:
            r["busbw_gbps"] = 5.0 if i == 0 else 20.0
    # a fabric qualification over six hosts, one of whose HCAs is slow with every peer
    six = [(name, f) for name, f in zip(names, facts_of) if any(f is g for g in h100[10:16])]
    fabric = synthetic_facts([n for n, _ in six], 2, lambda a, b, rail: 0.5 if rail == 1 and six[2][0] in (a, b) else 1.0)
    for name, f in six:
        f["fabric"] = fabric[name]


def test_fleet_checks_need_only_the_facts_workers_hand_back(demo_inputs: list[HostInput]) -> None:
    """What a host hands the fleet-wide steps (checks.fleet_facts, the verdict a worker sends back)
    must be all that every fleet check reads: on a fleet where each of them finds something, the
    findings on full facts and on the handed-back facts are the same."""
    inputs = _copies(demo_inputs, 80)
    judged = [(h, *judge_host(h, _expect(h))) for h in inputs]
    # the verdict a worker hands back carries exactly that cut
    assert all(verdict.fleet_view.facts == fleet_facts(rec["facts"]) for _, rec, verdict in judged)
    facts_of = [rec["facts"] for _, rec, _ in judged]
    _every_fleet_check_has_work(facts_of, [h.name for h, _, _ in judged])
    full, slim = [], []
    assert len(judged) == len(facts_of)
    for (h, _, verdict), facts in zip(judged, facts_of):
        outcomes = {**verdict.fleet_view.outcomes, **({"nccl": "ok"} if "nccl" in facts else {}),
                    **({"fabric": "ok"} if "fabric" in facts else {})}
        full.append(HostView(name=h.name, facts=facts, outcomes=outcomes, expect=_expect(h), vars=h.vars))
        slim.append(HostView(name=h.name, facts=fleet_facts(facts), outcomes=outcomes, expect=_expect(h),
                             vars=h.vars))
    for check in FLEET_CHECKS:
        on_full = [f.to_dict() for f in check(full)]
        assert on_full, f"{check.__module__}.{check.__name__} finds nothing on this fleet: give it work"
        assert [f.to_dict() for f in check(slim)] == on_full, f"{check.__module__}.{check.__name__}"
    fields = {f.to_dict()["subject"] for f in FLEET_CHECKS[-1](full)} | {
        f.to_dict()["subject"] for c in FLEET_CHECKS for f in c(full) if f.id == "software.version.outlier"}
    assert {"NVIDIA driver", "CUDA driver version", "kernel", "BIOS", "VBIOS"} <= fields


def test_a_failing_worker_falls_back_and_raises_like_a_serial_run(demo_inputs: list[HostInput],
                                                                  tmp_path: Path) -> None:
    inputs = _copies(demo_inputs, 40)
    bad = inputs[33].name

    def expect(h: HostInput) -> Expectations:
        if h.name == bad:
            raise RuntimeError(f"broken expectation for {h.name}")
        return Expectations()

    with pytest.raises(RuntimeError, match="broken expectation"):
        build_fleet(meta("t"), inputs, expect, _overrides, spool=tmp_path, workers=2).to_document()
    assert not list(tmp_path.glob(".verdict-*")), "the spool of the failed attempt is removed"


def test_the_spool_lives_in_the_given_directory_until_the_fleet_is_dropped(demo_inputs: list[HostInput],
                                                                          tmp_path: Path) -> None:
    fleet = build_fleet(meta("t"), _copies(demo_inputs, 30), _expect, _overrides, spool=tmp_path, workers=2).to_document()
    spools = list(tmp_path.glob(".verdict-*"))
    assert len(spools) == 1 and list(spools[0].glob("part*.json"))
    del fleet
    gc.collect()
    assert not spools[0].exists()


def test_a_verdict_comes_back_equal_and_holds_equal_facts_once(demo_inputs: list[HostInput]) -> None:
    """What a worker hands the controller: equal after the trip (through the handoff stream and a
    plain pickle alike), and the facts sections equal between hosts are one object there."""
    verdicts = [judge_host(h, _expect(h))[1] for h in _copies(demo_inputs, 2 * len(demo_inputs))]
    buf = io.BytesIO()
    for v in verdicts:
        handoff.dump(v, buf)
    buf.seek(0)
    loaded = list(handoff.Reader().load_all(buf))
    assert loaded == verdicts
    assert [pickle.loads(pickle.dumps(v)) for v in verdicts] == verdicts
    assert copy.deepcopy(verdicts) == verdicts
    # copies of one host under other names: a section equal on two hosts is one object
    shared = 0
    for i, v in enumerate(loaded):
        for w in loaded[i + 1:]:
            for section, value in v.fleet_view.facts.items():
                if isinstance(value, (dict, list)) and value and value == w.fleet_view.facts.get(section):
                    assert value is w.fleet_view.facts[section], (v.name, w.name, section)
                    shared += 1
            if v.descriptor and v.descriptor == w.descriptor:
                assert v.descriptor is w.descriptor
    assert shared > len(loaded)


def test_worker_count() -> None:
    assert fleet_workers.worker_count(10, 4) == 4
    assert fleet_workers.worker_count(3, 8) == 3  # never more workers than hosts
    assert fleet_workers.worker_count(100, None) == 1 or os.environ.get(fleet_workers.WORKERS_ENV)
    cpus = len(os.sched_getaffinity(0))
    if not os.environ.get(fleet_workers.WORKERS_ENV):
        assert fleet_workers.worker_count(100_000) == min(cpus, fleet_workers.MAX_WORKERS)
    # another thread running: forking could leave one of its locks held in the child
    release = threading.Event()
    t = threading.Thread(target=release.wait)
    t.start()
    try:
        assert fleet_workers.worker_count(10_000, 4) == 1
    finally:
        release.set()
        t.join()


def test_probe_run_with_workers_prints_and_stores_what_one_process_does(tmp_path: Path) -> None:
    """The whole CLI over records kept on disk: the table, drift, --format json, the outputs and
    the HTML report read the hosts back from the spool."""
    outs = {}
    for workers in ("1", "2"):
        run_dir = tmp_path / f"w{workers}"
        env = dict(os.environ, PYTHONPATH=str(ROOT), FLEETPROBE_WORKERS=workers)
        args = [sys.executable, "-m", "orchestrator", "run", "-l", "demo", "-o", str(run_dir),
                "--prometheus", str(tmp_path / f"w{workers}.prom"), "--junit", str(tmp_path / f"w{workers}.xml"),
                "--html", str(tmp_path / f"w{workers}.html"), "--show", "topo"]
        proc = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 1, proc.stderr  # the demo -l demo group has fail findings
        js = subprocess.run([*args[:7], str(tmp_path / f"j{workers}"), "--format", "json"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
        outs[workers] = (proc.stdout, json.loads(js.stdout), (tmp_path / f"w{workers}.prom").read_text(),
                         (tmp_path / f"w{workers}.html").read_text(), read_plain(run_dir / "fleet.json"))
        assert not list(run_dir.glob(".verdict-*")), "the spool is gone when the command ends"

    def same(text: str) -> str:
        # the run directory and the probes' durations (the table's time column) differ between runs
        return "\n".join(re.sub(r"\s+\d+\.\d+s(\s|$)", r"\1", line) for line in text.splitlines()
                         if "/w1" not in line and "/w2" not in line)

    one, two = outs["1"], outs["2"]
    assert same(one[0]) == same(two[0])
    assert same(two[0]).count("dgx-h100-0") >= 9  # the hosts table and the topo views are compared
    for fleet_a, fleet_b in ((one[1], two[1]), (one[4], two[4])):
        assert fleet_a["findings"] == fleet_b["findings"]
        assert fleet_a["classes"] == fleet_b["classes"]
        assert [{k: v for k, v in h.items() if k != "probes"} for h in fleet_a["hosts"]] == \
               [{k: v for k, v in h.items() if k != "probes"} for h in fleet_b["hosts"]]
    assert "fleetprobe_host_up" in two[2] or "fleetprobe_" in two[2]
    assert len(two[3]) > 10_000 and "dgx-h100-05" in two[3]


def test_judge_passes_the_run_directory_as_spool(demo_inputs: list[HostInput], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fleet_workers.WORKERS_ENV, "2")
    fleet = judge(meta("t"), _copies(demo_inputs, 20), {}, spool=tmp_path)
    assert isinstance(fleet.hosts.records, SpooledRecords)
    assert list(tmp_path.glob(".verdict-*"))
