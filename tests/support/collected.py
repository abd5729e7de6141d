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
