"""An uncorrectable ECC error planted in a machine description is seen by the real nvml probe,
its normalizer and the judge (issue 47 item 7): the fake libnvidia-ml's total ECC counters are the
per-location counters of the description summed, as NVML's totals are over every location."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from orchestrator.engine.envelope import parse_envelope
from orchestrator.engine.payload import build_script
from orchestrator.engine.results import HostInput
from orchestrator.simulate.fake_nvml import build_fake_nvml
from orchestrator.verdict import rules
from orchestrator.verdict.expectations import Expectations
from orchestrator.verdict.findings import Severity
from orchestrator.verdict.judge import judge_host
from tests.engine.test_nvml_helpers import CACHE, PY, needs_gcc

BUS = "0000:9a:00.0"  # GPU4 of the dgx-h100 fixture


def _judged(errors: dict[str, Any]) -> list[Any]:
    """The findings of a dgx-h100 whose GPU at BUS has `errors` (the description's memory_errors),
    through the compiled fake, the nvml probe as shipped, normalize_host and the host checks."""
    spec = {"base": "dgx-h100", "machine": "dgx-h100--planted-ecc",
            "gpu_overrides": {BUS: {"memory_errors": errors}}}
    lib = build_fake_nvml(spec, CACHE, seed="ecc")
    proc = subprocess.run([PY, "-"], input=build_script("nvml", {"lib": str(lib)}, deadline_s=30),
                          capture_output=True, timeout=60)
    env = parse_envelope(proc.stdout, "nvml")
    assert env.status == "ok", env.errors
    host = HostInput(name="h", address="10.0.0.1", groups=[], data={"nvml": env.data},
                     probes={"nvml": {"outcome": "ok", "reason": "", "duration_s": 0.1}})
    _, verdict = judge_host(host, Expectations())
    return list(verdict.findings)


# Several places an uncorrectable error lands: since the driver loaded (a FAIL), or only over the
# GPU's life (a WARN), in DRAM, in SRAM, in both.
PLANTED = [
    ({"dram": {"volatile_uncorrected": 1, "aggregate_uncorrected": 1}}, Severity.FAIL),
    ({"sram": {"volatile_uncorrected": 3, "aggregate_uncorrected": 5}}, Severity.FAIL),
    ({"dram": {"volatile_uncorrected": 2, "aggregate_uncorrected": 2},
      "sram": {"volatile_uncorrected": 1, "aggregate_uncorrected": 1}}, Severity.FAIL),
    ({"dram": {"aggregate_uncorrected": 4}}, Severity.WARN),
    ({"sram": {"aggregate_uncorrected": 1, "aggregate_corrected": 9}}, Severity.WARN),
]


@needs_gcc
@pytest.mark.parametrize("errors,severity", PLANTED)
def test_planted_uncorrectable_error_is_found_on_its_gpu(errors, severity):
    found = [f for f in _judged(errors) if f.id == rules.gpu.ECC_UNCORRECTABLE.id]
    assert len(found) == 1, [f.id for f in _judged(errors)]
    assert found[0].severity == severity
    assert BUS in found[0].subject and [d.bus_id for d in found[0].devices] == [BUS]


@needs_gcc
@pytest.mark.parametrize("errors", [{}, {"dram": {"volatile_corrected": 400, "aggregate_corrected": 400}},
                                    {"sram": {"aggregate_corrected": 2}}])
def test_corrected_errors_alone_raise_no_uncorrectable_finding(errors):
    assert not [f for f in _judged(errors) if f.id == rules.gpu.ECC_UNCORRECTABLE.id]
