"""The one call `probe run` / `probe show` make for the machine outputs a user asked for."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from orchestrator.present.outputs import write_atomic
from orchestrator.present.outputs.ansible_inventory import write_inventory
from orchestrator.present.outputs.junit import write_junit
from orchestrator.present.outputs.prometheus import write_prometheus
from orchestrator.present.outputs.slurm_drain import write_drain
from orchestrator.present.outputs.tabular import render_findings, render_hosts


class OutputError(OSError):
    """An output file could not be written; the message names the file and the reason."""


def write_outputs(fleet: dict[str, Any], *, prometheus: str | Path | None = None, junit: str | Path | None = None,
                  ansible_inventory: str | Path | None = None, hosts_csv: str | Path | None = None,
                  findings_csv: str | Path | None = None, check_ids: Iterable[str] = (),
                  junit_fail_on: Iterable[str] = ("fail",), slurm_drain: str | Path | None = None) -> list[Path]:
    """Write each requested file atomically; every one is attempted even if an earlier one fails,
    then OutputError lists what could not be written."""
    jobs = [
        ("--prometheus", prometheus, lambda p: write_prometheus(fleet, p)),
        ("--junit", junit, lambda p: write_junit(fleet, p, check_ids=check_ids, fail_on=junit_fail_on)),
        ("--ansible-inventory", ansible_inventory, lambda p: write_inventory(fleet, p)),
        ("--slurm-drain", slurm_drain, lambda p: write_drain(fleet, p)),
        ("--hosts-csv", hosts_csv, lambda p: write_atomic(p, render_hosts(fleet, "csv"))),
        ("--findings-csv", findings_csv, lambda p: write_atomic(p, render_findings(fleet, "csv"))),
    ]
    written: list[Path] = []
    errors: list[str] = []
    for flag, path, write in jobs:
        if path is None:
            continue
        try:
            written.append(write(Path(path)))
        except OSError as e:
            errors.append(f"{flag} {path}: {e.strerror or e}")
    if errors:
        raise OutputError("could not write " + "; ".join(errors))
    return written
