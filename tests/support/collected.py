"""Helpers for the runs whose probes travel by another road (probe bundle + srun / Ansible / files):
simulated machines reached with `ansible_connection: local`, a bundle run under a real
`python3 -I -S -`, and findings compared as sets of their judged content."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.fleet import SimulatedHost, expectations


def local_inventory(sims: list[SimulatedHost], extra: dict[str, dict[str, Any]] | None = None) -> str:
    """The simulated hosts as an inventory of local hosts (probes pointed at each one's fixtures)."""
    lines = ["all:", "  hosts:"]
    for s in sims:
        vars = {"ansible_connection": "local", **s.probe_vars(), "probe_expect": expectations(s.name),
                **(extra or {}).get(s.name, {})}
        lines.append(f"    {s.name}:")
        lines += [f"      {k}: {json.dumps(v)}" for k, v in vars.items()]
    return "\n".join(lines) + "\n"


def run_script(script: Path, out: Path, env: dict[str, str] | None = None, python: str = sys.executable) -> None:
    """`python3 -I -S - < script > out`, as a host, srun or cron runs a bundle."""
    with open(script, "rb") as stdin, open(out, "wb") as stdout:
        subprocess.run([python, "-I", "-S", "-"], stdin=stdin, stdout=stdout, check=True, timeout=120,
                       env={**os.environ, **(env or {})})


def finding_keys(findings: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What a finding says, without where it was stored: comparable across runs of one fleet."""
    return sorted((f["id"], f["host"], f["subject"], f["severity"], f["kind"], f["message"],
                   json.dumps(f["expected"], sort_keys=True), json.dumps(f["actual"], sort_keys=True))
                  for f in findings)


def latest_run(results: Path) -> Path:
    runs = sorted(p for p in results.iterdir() if p.is_dir() and not p.name.startswith("."))
    assert runs, f"no run under {results}"
    return runs[-1]


AUDIT_PROBES = ["host", "pcie", "nvml", "nvlink", "kmsg", "nic"]  # playbooks/audit.yml
RECORDINGS = Path(__file__).resolve().parents[2] / "orchestrator" / "demo" / "recordings"


def recorded_document(identity: dict[str, str], machine: str, for_host: str | None = None) -> dict[str, Any]:
    """A bundle document as the bundle runner prints it on `machine` of the demo recordings (each
    answer the recorded envelope), claiming `identity` (hostname, node_name ...) and `for_host`."""
    answers = []
    for p in AUDIT_PROBES:
        f = RECORDINGS / machine / f"{p}.json"
        out = f.read_text() if f.is_file() else json.dumps(
            {"envelope_version": 1, "probe": p, "probe_version": "replay", "status": "unsupported", "data": {},
             "warnings": [], "duration_s": 0, "errors": ["no recording of this probe for this host"]})
        answers.append({"probe": p, "state": "ran", "exit": 0, "timed_out": False, "out_trunc": False,
                        "err_trunc": False, "duration_s": 0.05, "out": len(out.encode()), "err": 0,
                        "stdout": {"text": out}, "stderr": {"text": ""}})
    return {"fleetprobe_bundle": 1, "identity": identity, "for_host": for_host,
            "plan": {"playbook": "audit", "probes": [], "expect": [], "timeout": 60.0},
            "calls": [{"name": p, "args": {}, "timeout_s": 60.0} for p in AUDIT_PROBES], "probes": answers}
