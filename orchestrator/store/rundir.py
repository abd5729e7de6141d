"""The run directory: raw envelopes as hosts finish, then fleet.json; everything written atomically.

Layout: <results>/<YYYYmmddTHHMMSSZ>-<id>/ run.json, fleet.json, findings.json,
raw/<host>/<probe>.json (envelope), raw/<host>/<probe>.stdout|.stderr (when not an envelope),
raw/<host>/_host.json (inventory facts needed to re-judge: name, address, groups, public vars),
fleet.index.json (where each host's record sits in fleet.json: orchestrator/store/fleet_file.py), and
while a big fleet is judged, .verdict-*/ (the workers' spool: orchestrator/verdict/parallel.py).
A run killed half-way still has run.json (state "running"/"interrupted") and every finished host's
raw files, so it can be listed, shown and re-judged.
"""

from __future__ import annotations

import functools
import getpass
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from orchestrator.engine.results import HostInput
from orchestrator.engine.runner import HostResult
from orchestrator.store import atomic
from orchestrator.store.fleet_file import write_fleet
from orchestrator.store.history import load_fleet, new_run_id
from orchestrator.store.redaction import public_vars

_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def default_results_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "fleetprobe" / "runs"


def safe_component(name: str) -> str:
    """A host name as one path component: nothing like '..' or '/' survives."""
    s = _SAFE.sub(lambda m: f"%{ord(m.group()):02X}" if ord(m.group()) < 256 else "_", name)
    if s in ("", ".", "..") or s.startswith("."):
        s = "%2E" + s[1:] if s.startswith(".") else "_"
    return s[:200]


@dataclass
class RunDirectory:
    """One run's directory: the only code that creates, writes or reads a run's files."""

    dir: Path
    meta: dict[str, Any]

    @classmethod
    def create(cls, results_dir: Path, meta: dict[str, Any], run_dir: Path | None = None) -> RunDirectory:
        run_id = new_run_id()
        d = run_dir or (results_dir / run_id)
        d.mkdir(parents=True, exist_ok=True)
        meta = {"id": d.name, "state": "running", "started": _now(), "user": _user(), **meta}
        w = cls(d, meta)
        atomic.write_json(d / "run.json", meta, indent=1)
        return w

    @classmethod
    def open(cls, path: Path) -> RunDirectory:
        """A stored run; its run.json may be missing (a run killed before writing it): empty meta."""
        return cls(path, read_meta(path))

    # ------------------------------------------------------------------ writing

    def host_finished(self, res: HostResult, origin: dict[str, Any] | None = None) -> None:
        """A host's results.  `origin`: where results that did not come over our own transport were
        collected (a bundle's document: the host's identity and the file; an Ansible job event)."""
        hdir = self._host_dir(res.host.name)
        meta_path = hdir / "_host.json"
        summaries = {p: r.summary() for p, r in res.probes.items()}
        if meta_path.is_file():  # a second play on the same host adds its probes
            summaries = {**json.loads(meta_path.read_text()).get("probes", {}), **summaries}
        host_meta: dict[str, Any] = {
            "name": res.host.name,
            "address": res.host.address,
            "groups": res.host.groups,
            "vars": public_vars(res.host.vars),
            "probes": summaries,
            "duration_s": round(res.duration_s, 3),
        }
        if origin is not None:
            host_meta["origin"] = origin
        atomic.write_json(meta_path, host_meta, durable=False)
        for name, pr in res.probes.items():
            if pr.envelope is not None:
                atomic.write_json(hdir / f"{name}.json", pr.envelope.to_dict(), durable=False)
            if pr.stdout:
                atomic.write_bytes(hdir / f"{name}.stdout", pr.stdout, durable=False)
            if pr.stderr.strip():
                atomic.write_bytes(hdir / f"{name}.stderr", pr.stderr, durable=False)

    def imported_host(self, host: HostInput, evidence: dict[str, Any]) -> None:
        """A host judged from text evidence: its facts, and the parsed evidence they came from."""
        hdir = self._host_dir(host.name)
        atomic.write_json(hdir / "_host.json", {"name": host.name, "address": host.address, "groups": host.groups,
                                                "vars": {}, "probes": host.probes})
        atomic.write_json(hdir / "_facts.json", evidence)

    def copy_raw_from(self, other: RunDirectory) -> None:
        """Another run's raw data, so a re-judged run can be shown, diffed and re-judged again."""
        shutil.copytree(other.dir / "raw", self.dir / "raw", dirs_exist_ok=True)

    def finish(self, fleet: dict[str, Any], state: str = "complete") -> None:
        write_fleet(self.dir / "fleet.json", fleet)
        atomic.write_json(self.dir / "findings.json", fleet["findings"])
        self.meta.update(state=state, finished=_now(), summary=fleet["summary"])
        atomic.write_json(self.dir / "run.json", self.meta, indent=1)

    def mark(self, state: str) -> None:
        self.meta.update(state=state, finished=_now())
        atomic.write_json(self.dir / "run.json", self.meta, indent=1)

    # ------------------------------------------------------------------ reading

    def fleet(self) -> dict[str, Any]:
        """fleet.json, host records read on demand through its index; RunNotFound when unreadable."""
        return load_fleet(self.dir)

    def host_inputs(self, with_data: bool = True) -> list[HostInput]:
        """The stored hosts; without data: names, groups, variables and probe summaries only."""
        return load_host_inputs(self.dir, with_data)

    def _host_dir(self, name: str) -> Path:
        return self.dir / "raw" / safe_component(name)


def read_meta(run_dir: Path) -> dict[str, Any]:
    """run.json of a run, or {} when it is missing or unreadable."""
    try:
        meta = json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def release_envelope_data(res: HostResult) -> None:
    """Drop the envelopes' data once host_finished wrote them: the run then holds summaries, not
    every host's facts (hundreds of KB per GPU server); judging reads them back
    (host_input_from_result with `stored_in`)."""
    for r in res.probes.values():
        if r.envelope is not None:
            r.envelope.data = {}


def host_input_from_result(res: HostResult, stored_in: Path | None = None) -> HostInput:
    """What the verdict needs of one host; `stored_in`: the run directory whose raw files hold the
    envelopes (after release_envelope_data), read back when the host is judged."""
    with_envelope = [p for p, r in res.probes.items() if r.envelope is not None]
    hdir = stored_in / "raw" / safe_component(res.host.name) if stored_in is not None else None
    return HostInput(
        name=res.host.name,
        address=res.host.address,
        groups=res.host.groups,
        probes={p: r.summary() for p, r in res.probes.items()},
        data={} if hdir else {p: r.envelope.data for p, r in res.probes.items() if r.envelope is not None},
        warnings={p: r.envelope.warnings for p, r in res.probes.items() if r.envelope and r.envelope.warnings},
        vars=public_vars(res.host.vars),
        load_data=functools.partial(read_envelope_data, hdir, with_envelope) if hdir else None,
    )


def read_envelope_data(hdir: Path, probes: list[str]) -> dict[str, dict[str, Any]]:
    """probe -> its envelope's data, from a host's raw directory (probes without a file: absent)."""
    data = {}
    for p in probes:
        env_path = hdir / f"{p}.json"
        if env_path.is_file():
            data[p] = json.loads(env_path.read_text()).get("data", {})
    return data


def load_host_inputs(run_dir: Path, with_data: bool = True) -> list[HostInput]:
    """Read a stored run's raw files back (for rejudge); hosts in the order they were recorded.
    with_data=False: the envelopes and facts are not read (merge needs the hosts' groups only)."""
    out: list[HostInput] = []
    raw = run_dir / "raw"
    if not raw.is_dir():
        return out
    entries = []
    for hdir in raw.iterdir():
        meta_path = hdir / "_host.json"
        if not meta_path.is_file():
            continue
        meta = json.loads(meta_path.read_text())
        data = read_envelope_data(hdir, list(meta.get("probes", {}))) if with_data else {}
        facts_path = hdir / "_facts.json"  # imported text evidence: facts, no envelopes
        facts = json.loads(facts_path.read_text()).get("facts") if with_data and facts_path.is_file() else None
        entries.append((meta_path.stat().st_mtime, HostInput(
            name=meta["name"], address=meta.get("address", meta["name"]), groups=meta.get("groups", []),
            probes=meta.get("probes", {}), data=data, vars=meta.get("vars", {}), facts=facts)))
    order = read_meta(run_dir).get("hosts_order") or []
    pos = {n: i for i, n in enumerate(order)}
    entries.sort(key=lambda e: (pos.get(e[1].name, len(pos)), e[0]))
    return [e[1] for e in entries]


def elapsed_since(t0: float) -> float:
    return time.monotonic() - t0
