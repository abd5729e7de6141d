"""Issue 47 item 2: a partial playbook classes nothing it did not measure.

`probe run -p fabric` (host and nic: no nvml, pcie or nvlink) once classed every DGX
`cpu-only-DGXH100`, and the next run's drift compared against it.  A host is classed only by a run
in which every shape probe (host, pcie, nvml, nvlink) answered (verdict/judge.py:shape_descriptor);
a fabric-only, quick or `--probe` run leaves it unclassed and says so, and drift compares classes
only between runs that measured them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api.stored import load_result
from orchestrator.verdict import rules
from orchestrator.verdict.judge import shape_descriptor

ROOT = Path(__file__).resolve().parents[2]


def probe(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="400"), timeout=300)
    assert proc.returncode in (0, 1, 4, 5) and "Traceback" not in proc.stderr, proc.stderr
    return proc


# Runs that do not measure a host's shape: the shipped partial playbooks, and --probe selections
# that leave out one shape probe or more.
PARTIAL = {
    "fabric": ["-p", "fabric"],
    "quick": ["-p", "quick"],
    "host_nic": ["--probe", "host", "--probe", "nic"],
    "no_nvlink": ["--probe", "host", "--probe", "pcie", "--probe", "nvml"],
    "no_pcie": ["--probe", "host", "--probe", "nvml", "--probe", "nvlink"],
    "no_host": ["--probe", "pcie", "--probe", "nvml", "--probe", "nvlink"],
}


@pytest.mark.parametrize("case", sorted(PARTIAL))
def test_a_partial_run_classes_no_host(tmp_path: Path, case: str) -> None:
    results = tmp_path / "runs"
    proc = probe("run", *PARTIAL[case], "--results", str(results))
    [run] = [p for p in results.iterdir() if p.is_dir()]
    fleet = load_result(run)
    assert fleet.classes == [] and len(fleet.hosts.names()) == 48
    assert [h.name for h in fleet.hosts if h.topology_class] == []
    assert "cpu-only" not in proc.stdout
    assert "topology classes: none: this run measured no host's shape" in " ".join(proc.stdout.split())
    assert not [f for f in fleet.findings if f.id == rules.topology.CLASS_OUTLIER.id]


@pytest.mark.parametrize("case", ["fabric", "quick", "no_nvlink"])
def test_a_partial_run_between_two_audits_changes_no_class(tmp_path: Path, case: str) -> None:
    results = str(tmp_path / "runs")
    limit = ["-l", "dgx-h100-01,dgx-h100-04,dgx-a100-01"]
    probe("run", "-q", *limit, "--results", results)
    partial = probe("run", *limit, *PARTIAL[case], "--results", results)
    again = probe("run", *limit, *PARTIAL[case], "--results", results)
    audit = probe("run", *limit, "--results", results)
    for proc in (partial, again, audit):
        assert not re.search(r"topology class \S+ -> ", proc.stdout), proc.stdout
    assert "no change" in audit.stdout  # nothing changed: a partial run leaves no trace in the next drift


ANSWERED = {"outcome": "ok"}
FACTS: dict[str, Any] = {"host": {"board": {"model": "DGXH100"}}}
SHAPE = ("host", "pcie", "nvml", "nvlink")


def _probes(**changed: dict[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {p: dict(ANSWERED) for p in SHAPE}
    for p, record in changed.items():
        if record is None:
            out.pop(p)
        else:
            out[p] = record
    return out


# A shape probe that is missing or did not answer: no class from what was not measured.
UNMEASURED = {
    "nvml_not_asked": _probes(nvml=None),
    "nvlink_not_asked": _probes(nvlink=None),
    "pcie_not_asked": _probes(pcie=None),
    "nvml_skipped": _probes(nvml={"outcome": "skipped", "reason": "not in this play"}),
    "nvml_timeout": _probes(nvml={"outcome": "timeout"}),
    "nvml_failed": _probes(nvml={"outcome": "failed"}),
    "nvml_interrupted": _probes(nvml={"outcome": "interrupted"}),
    "nvml_not_a_record": _probes(nvml="ok"),  # type: ignore[arg-type]
    "outcome_missing": _probes(nvml={}),
    # one probe's record claiming to be text does not make a probed host an import
    "one_text_record": _probes(nvml=None, host={"outcome": "ok", "probe_version": "text"}),
}


@pytest.mark.parametrize("case", sorted(UNMEASURED))
def test_no_descriptor_from_a_shape_probe_that_did_not_answer(case: str) -> None:
    assert shape_descriptor(UNMEASURED[case], FACTS) is None


# Where the shape was measured the host is described, GPU-less hosts included: NVML that answers
# "no GPU library here" (unsupported) is an answer, and a genuinely CPU-only host stays cpu-only.
MEASURED = {
    "all_ok": _probes(),
    "nvml_unsupported": _probes(nvml={"outcome": "unsupported", "reason": "no libnvidia-ml"},
                                nvlink={"outcome": "unsupported"}),
    "raw_import": {"raw": {"outcome": "ok"}},
    "text_import": {"nvml": {"outcome": "ok", "reason": "imported from text", "probe_version": "text"},
                    "nvlink": {"outcome": "ok", "reason": "imported from text", "probe_version": "text"}},
    "no_probe_records": {},
}


@pytest.mark.parametrize("case", sorted(MEASURED))
def test_a_measured_shape_is_described(case: str) -> None:
    desc = shape_descriptor(MEASURED[case], FACTS)
    assert desc is not None and desc["board"] == "DGXH100" and desc["gpu_count"] == 0
