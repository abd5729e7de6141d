"""What the simulated machines (orchestrator/simulate/machines/*.yaml) declare, for tests that
hold a probe's or a normalizer's answer to the machine it ran on: one home for those expectations."""

from __future__ import annotations

from orchestrator.simulate.fake_nvml import expand_machine, load_machine


def nvml_gpu_bus_ids(machine: str) -> list[str]:
    """The GPUs' bus ids of the machine's NVML description, in NVML order (a variant's missing or
    extra GPUs applied)."""
    return [g["bus_id"] for g in expand_machine(load_machine(machine))["gpus"]]
