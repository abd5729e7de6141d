"""The bundled demo shows the product, not its gaps (issue 49 item 6).

Every simulated demo host answers every probe of every shipped playbook from a recording of the real
probe (orchestrator/simulate/record.py); where a recording is missing anyway (a probe newer than the
recordings, a host left out) the replay transport skips that probe with the reason, so its checks
read as not judged, never as the host's platform being unsupported and never as passed.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api.playbook import load_playbook, shipped_playbooks
from orchestrator.simulate.record import demo_hosts, same_recording
from tests.verdict.test_verdict_demo import RECORDINGS, run_cli

BOOKS = {name: path for name, path, _ in shipped_playbooks()}


def _probes(book: str) -> list[str]:
    return sorted({step.name for play in load_playbook(BOOKS[book]).plays for step in play.probes})


def test_the_shipped_playbooks_are_the_ones_checked() -> None:
    # a new shipped playbook is checked below too; one of these gone would silently check less
    assert {"audit", "premigration", "quick", "fabric"} <= set(BOOKS)


@pytest.mark.parametrize("book", sorted(BOOKS))
def test_every_demo_host_has_a_recording_of_every_probe_of_the_playbook(book: str) -> None:
    missing = [f"{host}/{probe}" for host in demo_hosts() for probe in _probes(book)
               if not (RECORDINGS / host / f"{probe}.json").is_file()]
    assert not missing, f"{book}: no recording of {', '.join(missing)} (python -m orchestrator.simulate.record)"


def _not_answered(fleet: dict[str, Any]) -> list[str]:
    demo = set(demo_hosts())
    return [f"{h['name']}:{name}={r['outcome']} ({r['reason']})" for h in fleet["hosts"] if h["name"] in demo
            for name, r in h["probes"].items() if r["outcome"] != "ok"]


@pytest.mark.parametrize("book", ["audit", "premigration", "quick"])
def test_shipped_playbook_on_the_demo_every_host_answers_every_probe(book: str, tmp_path: Path) -> None:
    """Before: `-p premigration` read `transport ok=4 unsupported=42`, nccl recorded on 4 hosts only."""
    _, fleet, err = run_cli(["-l", "demo", "-p", book, "--results", str(tmp_path / "results")], tmp_path / "run")
    assert fleet is not None, err
    assert sorted(h["name"] for h in fleet["hosts"]) == sorted(demo_hosts())
    assert _not_answered(fleet) == []
    recap = fleet["summary"]
    assert not recap.get("unsupported") and not recap.get("skipped"), recap


# What a demo host may lack: the newest probe, a GPU-to-GPU probe, an inventory probe, several at once.
MISSING = [("nccl",), ("p2p",), ("nvlink",), ("p2p", "nccl"), ("host", "kmsg")]


@pytest.mark.parametrize("missing", MISSING, ids=["+".join(m) for m in MISSING])
def test_a_missing_recording_reads_as_not_judged_with_its_reason(missing: tuple[str, ...], tmp_path: Path) -> None:
    host = "dgx-h100-01"
    copy = tmp_path / host
    shutil.copytree(RECORDINGS / host, copy)
    for probe in missing:
        (copy / f"{probe}.json").unlink()
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(f"all:\n  hosts:\n    {host}:\n      ansible_connection: replay\n"
                         f"      probe_replay: {copy}\n")
    _, fleet, err = run_cli(["-i", str(inventory), "-p", "premigration", "--results", str(tmp_path / "res")],
                             tmp_path / "run")
    assert fleet is not None, err
    (h,) = fleet["hosts"]
    for probe in missing:
        got = h["probes"][probe]
        assert got["outcome"] == "skipped", got  # not "unsupported": the simulated platform has it
        assert got["reason"] == f"no recording of probe {probe} for demo host {host}"
    assert not [p for p, r in h["probes"].items() if r["outcome"] == "unsupported"]
    # the probes that were recorded still ran
    assert all(r["outcome"] == "ok" for p, r in h["probes"].items() if p not in missing)
    # what the missing probes would have judged is listed as not judged, with the reason
    reasons = " | ".join(str(why) for why in h["not_judged"].values())
    for probe in missing:
        assert f"no recording of probe {probe} for demo host {host}" in reasons, reasons
    # and nothing of theirs passed or failed: no finding from a probe that did not answer
    prefixes = {"nccl": ("nccl.",), "p2p": ("p2p.",)}
    judged = [f["id"] for f in fleet["findings"] for p in missing for pre in prefixes.get(p, ()) if f["id"].startswith(pre)]
    assert judged == []


def test_re_recording_keeps_a_recording_that_says_the_same() -> None:
    """Re-recording must not churn the goldens: timings and the fakes' build hashes are not news."""
    text = (RECORDINGS / "dgx-h100-12" / "nccl.json").read_text()
    assert re.search(r"/_libs/fake-[a-z0-9-]+-[0-9a-f]{16}/", text)
    rebuilt = re.sub(r"(/_libs/fake-[a-z0-9-]+)-[0-9a-f]{16}/", r"\1-0123456789abcdef/", text)
    slower = rebuilt.replace('"duration_s": ', '"duration_s": 1', 1).replace('"elapsed_s": ', '"elapsed_s": 2', 1)
    assert slower != text and same_recording(text, slower)
    # what the recording says is news: a status, a figure, a library of another machine
    for old, new in (('"status": "ok"', '"status": "error"'), ('"busbw_gbps": ', '"busbw_gbps": 1'),
                     ("fake-nccl-dgx-h100--nccl-", "fake-nccl-dgx-a100-")):
        assert old in text
        assert not same_recording(text, text.replace(old, new, 1))


def test_raw_mode_on_a_replayed_host_says_no_recording_and_is_no_internal_error(tmp_path: Path) -> None:
    """The replay transport has no recording of text commands (nvidia-smi, lspci): raw mode there
    ends with that said, not with a controller error (exit 70) or the probe JSON read as text."""
    host = "dgx-h100-02"
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(f"all:\n  hosts:\n    {host}:\n      ansible_connection: replay\n"
                         f"      probe_replay: {RECORDINGS / host}\n      probe_mode: raw\n")
    rc, fleet, err = run_cli(["-i", str(inventory), "-p", "quick", "--results", str(tmp_path / "res")], tmp_path / "run")
    assert rc != 70 and fleet is not None, err
    (h,) = fleet["hosts"]
    raw = h["probes"]["raw"]
    assert raw["outcome"] == "unsupported"
    assert f"no recording of this command for demo host {host}" in raw["reason"]
    assert {p: r["outcome"] for p, r in h["probes"].items() if p != "raw"} == {"host": "skipped", "nvml": "skipped"}
