"""Shared helpers of the NVML/NVLink tests: compiled fake libraries and real probe runs (cached).

The probes run exactly as over SSH: the bytes of `build_script` piped to `python3 -`.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from orchestrator.engine.envelope import parse_envelope  # noqa: E402
from orchestrator.engine.payload import build_script  # noqa: E402
from orchestrator.facts.normalize import gpus as norm_gpus  # noqa: E402
from orchestrator.facts.normalize import nvlink as norm_nvlink  # noqa: E402
from orchestrator.simulate.fake_nvml import build_fake_nvml  # noqa: E402
from orchestrator.verdict.checks import gpu as gpu_checks  # noqa: E402
from orchestrator.verdict.checks.base import HostView  # noqa: E402
from orchestrator.verdict.expectations import Expectations  # noqa: E402
from orchestrator.verdict.findings import Finding  # noqa: E402

# Content-hashed build directory: a rebuild happens only when fixture, C source or generator change.
CACHE = Path(tempfile.gettempdir()) / f"fleetprobe-fake-nvml-{os.getuid()}"
PY = shutil.which("python3") or sys.executable

needs_gcc = pytest.mark.skipif(not (shutil.which("gcc") or shutil.which("cc")), reason="gcc not installed")


@functools.cache
def fake_lib(machine: str, seed: str = "") -> Path:
    return build_fake_nvml(machine, CACHE, seed=seed)


@functools.cache
def run_probe(probe: str, machine: str, seed: str = "") -> tuple[dict[str, Any], float]:
    """(envelope dict, wall seconds) of one probe run against the fake library of `machine`."""
    script = build_script(probe, {"lib": str(fake_lib(machine, seed))}, deadline_s=30)
    t0 = time.perf_counter()
    proc = subprocess.run([PY, "-"], input=script, capture_output=True, timeout=60)
    wall = time.perf_counter() - t0
    env = parse_envelope(proc.stdout, probe)
    return env.to_dict(), wall


def host_facts(machine: str, seed: str = "") -> dict[str, Any]:
    nvml, _ = run_probe("nvml", machine, seed)
    nvl, _ = run_probe("nvlink", machine, seed)
    return {"gpus": norm_gpus.normalize(nvml["data"]), "nvlink": norm_nvlink.normalize(nvl["data"])}


def findings(view: HostView) -> list[Finding]:
    return [f for check in gpu_checks.CHECKS for f in check(view)]


def view_of(machine: str, facts: dict[str, Any] | None = None, expect: Expectations | None = None,
            name: str | None = None) -> HostView:
    facts = facts if facts is not None else host_facts(machine)
    outcomes = {"nvml": "ok", "nvlink": "ok"}
    if "pcie" in facts:
        outcomes["pcie"] = "ok"
    return HostView(name or machine, facts, outcomes, expect or Expectations())
