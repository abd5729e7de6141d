"""The output files `probe run` and `probe import` write, registered in one place: each entry's
flag and help make the command line's `--<format> FILE` option (`add_arguments`), and its writer
is what `write_outputs` calls.  A new output file is its module and one `OutputFile` line here."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.present.outputs import write_atomic
from orchestrator.present.outputs.ansible_inventory import write_inventory
from orchestrator.present.outputs.ctrf import write_ctrf
from orchestrator.present.outputs.junit import write_junit
from orchestrator.present.outputs.kubernetes import write_k8s
from orchestrator.present.outputs.node_verdicts import write_node_verdicts
from orchestrator.present.outputs.prometheus import write_prometheus
from orchestrator.present.outputs.slurm_drain import write_drain, write_resume
from orchestrator.present.outputs.tabular import render_findings, render_hosts
from orchestrator.verdict.remedy import Plan
from orchestrator.verdict.result import FleetResult


class OutputError(OSError):
    """Output files could not be written; the message names each file and the reason."""

    def __init__(self, failures: list[str]) -> None:
        super().__init__("; ".join(failures))
        self.failures = failures  # "--junit PATH: why", one per file


@dataclass(frozen=True)
class WriteContext:
    """What some writers need beyond the fleet."""

    check_ids: tuple[str, ...] | None = None  # JUnit's test cases (None: every id the run could raise)
    junit_fail_on: tuple[str, ...] = ("fail",)
    drain: Plan | None = None  # the verdict's drain decision (verdict/remedy.py); None: its default guard
    previous: FleetResult | None = None  # the run before this one (history): --k8s-out's transition times


@dataclass(frozen=True)
class OutputFile:
    name: str  # the keyword of write_outputs and the argparse dest; the flag is --<name with dashes>
    help: str
    write: Callable[[FleetResult, Path, WriteContext], Path]
    metavar: str = "FILE"

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


OUTPUT_FILES: tuple[OutputFile, ...] = (
    OutputFile("prometheus", "write a Prometheus textfile-collector file",
               lambda fleet, p, ctx: write_prometheus(fleet, p)),
    OutputFile("junit", "write JUnit XML (one test case per host x check)",
               lambda fleet, p, ctx: write_junit(fleet, p, check_ids=ctx.check_ids, fail_on=ctx.junit_fail_on)),
    OutputFile("ctrf", "write a CTRF JSON test report (the JUnit report's cases: one per host x check)",
               lambda fleet, p, ctx: write_ctrf(fleet, p, check_ids=ctx.check_ids, fail_on=ctx.junit_fail_on)),
    OutputFile("node_verdicts", "write one JSON verdict per host in NVIDIA Health Validation's NodeVerdict shape "
               "into DIR (DIR/<host>.json)",
               lambda fleet, p, ctx: write_node_verdicts(fleet, p, check_ids=ctx.check_ids), metavar="DIR"),
    OutputFile("ansible_inventory", "write a YAML Ansible inventory grouping hosts by health, class, finding, "
               "severity and outcome, with the connection variables of the source inventory",
               lambda fleet, p, ctx: write_inventory(fleet, p)),
    OutputFile("hosts_csv", "write the hosts as CSV (identity: board, BIOS, serials, driver, GPUs)",
               lambda fleet, p, ctx: write_atomic(p, render_hosts(fleet, "csv"))),
    OutputFile("findings_csv", "write the findings as CSV",
               lambda fleet, p, ctx: write_atomic(p, render_findings(fleet, "csv"))),
    OutputFile("slurm_drain", "write `scontrol update NodeName=... State=DRAIN Reason=...` lines for the hosts "
               "with fail findings, for you to apply (fleetprobe never drains by itself)",
               lambda fleet, p, ctx: write_drain(fleet, p, ctx.drain)),
    OutputFile("slurm_resume", "write `scontrol update NodeName=... State=RESUME` lines for the hosts this run found "
               "clean, each applied only to a node whose drain reason is fleetprobe's own (read when it runs)",
               lambda fleet, p, ctx: write_resume(fleet, p)),
    OutputFile("k8s_out", "write Kubernetes objects into DIR: per node a status patch with conditions, a label "
               "patch and DeviceTaintRules for its faulted GPUs, and DIR/apply.sh, the kubectl lines to apply "
               "them (fleetprobe never calls an API server)",
               lambda fleet, p, ctx: write_k8s(fleet, p, ctx.previous), metavar="DIR"),
)


def _by_name() -> dict[str, OutputFile]:
    return {o.name: o for o in OUTPUT_FILES}


def add_arguments(parser: argparse.ArgumentParser, only: Iterable[str] | None = None) -> None:
    """One `--<format> FILE` option per registered output (or per name in `only`)."""
    outputs = _by_name()
    for name in only if only is not None else outputs:
        out = outputs[name]
        parser.add_argument(out.flag, dest=out.name, metavar=out.metavar, help=out.help)


def requested(args: argparse.Namespace | Mapping[str, Any]) -> dict[str, Any]:
    """The output paths a parsed command line asked for (the options its parser has)."""
    values = vars(args) if isinstance(args, argparse.Namespace) else args
    return {name: values[name] for name in _by_name() if values.get(name) is not None}


def write_outputs(fleet: FleetResult, *, check_ids: Iterable[str] | None = None, junit_fail_on: Iterable[str] = ("fail",),
                  drain: Plan | None = None, previous: FleetResult | None = None,
                  **paths: str | Path | None) -> list[Path]:
    """Write each requested file (`name=path`, names as in OUTPUT_FILES) atomically; every one is
    attempted even if an earlier one fails, then OutputError lists what could not be written."""
    unknown = sorted(set(paths) - set(_by_name()))
    if unknown:
        raise TypeError(f"write_outputs: no output named {', '.join(unknown)}")
    ctx = WriteContext(None if check_ids is None else tuple(check_ids), tuple(junit_fail_on), drain, previous)
    written: list[Path] = []
    errors: list[str] = []
    for out in OUTPUT_FILES:
        path = paths.get(out.name)
        if path is None:
            continue
        try:
            written.append(out.write(fleet, Path(path), ctx))
        except OSError as e:
            errors.append(f"could not write {out.flag} {path}: {e.strerror or e}")
    if errors:
        raise OutputError(errors)
    return written
