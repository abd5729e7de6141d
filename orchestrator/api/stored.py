"""A stored run read back as the judged fleet: its run directory's fleet.json and run.json made
into one `FleetResult` (verdict/result.py).

The store reads the files (store/history.py, store/rundir.py), keeping a big fleet's host records
on disk (store/spool.py); the verdict's result takes the records as `files/records.py:HostRecords`
and never learns how they are kept.  This is where the two meet.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.store.history import load_fleet, load_past_fleet
from orchestrator.store.rundir import read_meta
from orchestrator.store.runmeta import RunMeta
from orchestrator.verdict.result import FleetResult


def load_result(run_dir: Path) -> FleetResult:
    """A stored run: its fleet.json (store/history.py:load_fleet, RunNotFound when unreadable) with
    its run.json (the run's own record of its state and times; the fleet's header where run.json
    is missing)."""
    return FleetResult.from_document(load_fleet(run_dir), _run_meta(run_dir))


def load_past_result(run_dir: Path) -> tuple[FleetResult, str]:
    """A stored run read for the history (drift, repeat offenders): load_result, its findings read
    up to store/history.py's HISTORY_FINDINGS, and the note that says so ('' when all were read)."""
    meta = _run_meta(run_dir)
    doc, note = load_past_fleet(run_dir)
    # roots are not decided again: drift compares (id, host, subject), repeat offenders ids and
    # severities, and deciding them pairs each host's findings (a past run of 200,000 findings on
    # one host took minutes)
    return FleetResult.from_document(doc, meta, grouped=False), note


def _run_meta(run_dir: Path) -> RunMeta | None:
    meta = read_meta(run_dir)
    return RunMeta.from_dict(meta) if meta else None
