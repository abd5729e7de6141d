"""What a run hands its checks of the previous run (api/session.py:previous_facts): the sections and
parts facts/model.py:PreviousFacts declares, so counters judged as growth between runs really get
their previous values (gpu.nvlink.errors read a section this once did not keep)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from orchestrator.api.session import previous_baseline, previous_facts
from orchestrator.verdict.checks import gpu_health
from orchestrator.verdict.checks.base import HostView


def _nvlink(replay: int) -> dict[str, Any]:
    return {"supported": True, "order": ["0000:18:00.0"], "nv": [[None]], "links_total": 1, "links_up_total": 1,
            "pairs": [], "nvswitches": [],
            "gpus": [{"index": 0, "bus_id": "0000:18:00.0", "links": [
                {"link": 0, "state": "up", "errors": {"replay": replay, "recovery": 0, "crc_flit": 0, "crc_data": 0}}]}]}


def _facts(replay: int) -> dict[str, Any]:
    return {"kmsg": {"readable": True, "boot_id": "b1", "events": []},
            "gpus": {"list": [{"index": 0, "bus_id": "0000:18:00.0"}]},
            "nvlink": _nvlink(replay),
            "pcie": {"devices": [{"bdf": "0000:18:00.0"}], "aer_links": []},
            "topology": {"devices": [], "matrix": []}}


def _run(results: Path, rid: str, facts: dict[str, Any] | None) -> Path:
    d = results / rid
    (d / "raw").mkdir(parents=True)
    run = {"id": rid, "state": "complete", "started": "2026-11-20T02:15:00+00:00",
           "finished": "2026-11-20T02:16:00+00:00", "inventory": ["fleet.yml"], "playbook": "audit",
           "probes": ["nvlink"], "limit": None, "user": "ops"}
    (d / "run.json").write_text(json.dumps(run))
    if facts is not None:
        hosts = [{"name": "h1", "outcome": "ok", "facts": facts}]
        (d / "fleet.json").write_text(json.dumps({"schema_version": 1, "run": run, "hosts": hosts, "findings": [],
                                                  "summary": {"hosts": 1, "findings": {}}}))
    return d


def test_the_previous_run_hands_on_nvlink_counters_and_not_the_whole_tree(tmp_path: Path) -> None:
    results = tmp_path / "results"
    _run(results, "20261120T021500Z-aaaaaa", _facts(replay=3))
    now = _run(results, "20261121T021500Z-bbbbbb", None)
    prev = previous_facts(previous_baseline(results, now).fleet)["h1"]
    assert prev["nvlink"] == {"gpus": _nvlink(3)["gpus"]}
    assert prev["pcie"] == {"aer_links": []}
    assert "topology" not in prev and set(prev) == {"kmsg", "gpus", "nvlink", "pcie"}
    # what the check makes of it: the replay counter grew by 6 within one boot
    view = HostView(name="h1", facts=copy.deepcopy(_facts(replay=9)), outcomes={"nvml": "ok", "nvlink": "ok"},
                    previous=prev)
    [f] = gpu_health.nvlink_errors(view)
    assert f.id == "gpu.nvlink.errors" and f.actual == {"link 0 replay": 6}
