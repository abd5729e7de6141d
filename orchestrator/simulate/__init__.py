"""Simulated hardware for tests and the demo: fixture machines described in `machines/`.

`sysfs.build_machine(name, dest)` writes a machine's sysfs/proc/dev tree; the NVML and CUDA fakes
built from `machines/<name>.nvml.yaml` / `.cuda.yaml` use the same GPU bus ids.
"""

from orchestrator.simulate.sysfs import FixtureError, build_machine, list_machines, load_description

__all__ = ["FixtureError", "build_machine", "list_machines", "load_description"]
