"""run.json as one typed value: what a run was asked to do and how far it got.

`RunDirectory` (store/rundir.py) is its only writer; every road that makes a run (`probe run`,
import, rejudge, merge, the Ansible and Slurm collections) fills one `RunMeta` instead of a dict
of its own.  fleet.json's `run` is `header()`: the part a reader of the judged fleet needs.

Read tolerantly: run.json of an old or damaged run gives the fields it has, each of the stored
type or left at its default, and keeps keys this version does not know (`extra`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

STATES = ("running", "complete", "interrupted", "failed")
# fleet.json's `run`: what of run.json a reader of the judged fleet needs, in this order
HEADER_KEYS = ("id", "state", "started", "finished", "stopped", "inventory", "playbook", "probes", "limit", "user")


@dataclass
class RunMeta:
    id: str = ""
    state: str = "running"  # running, complete, interrupted (Ctrl-C, SIGTERM), failed (results unwritable)
    started: str | None = None  # ISO 8601, UTC
    user: str | None = None
    cwd: str | None = None  # where the command ran: the directory the plan's relative paths were given in
    inventory: list[str] = field(default_factory=list)  # [] is the bundled demo fleet
    limit: str | None = None
    playbook: str | None = None  # the playbook's path
    probes: list[str] | None = None
    hosts_order: list[str] = field(default_factory=list)
    plan: dict[str, Any] | None = None  # api/plan.py PlanInputs.to_dict(): what rejudge rebuilds the plan from
    options: dict[str, Any] | None = None  # forks, timeouts, host key policy, become
    imported: bool = False  # judged from text evidence: no plan to rebuild
    collected: dict[str, Any] | None = None  # another engine carried the probes: {"via": ..., ...}
    rejudged_from: str | None = None
    # a rejudge under other expectations, playbook, baseline or floor than its source's: the options
    # it changed (["--expect"]).  A what-if of `rejudged_from`, never a state of the fleet: history
    # (store/history.py) never takes it for the run before a later one unless it is named.
    what_if: list[str] | None = None
    merged_from: list[dict[str, Any]] | None = None
    finished: str | None = None  # when judging began: the end of the fan-out, or where it was stopped
    # an interrupted run: how far it got ({"finished": hosts, "cut": cut off part-way, "never": never started})
    stopped: dict[str, int] | None = None
    summary: dict[str, Any] | None = None  # fleet.json's summary, for `probe runs` without reading the fleet
    # the security floor the hosts were judged against, where the run asked for it (file, date, made):
    # the report shows its date, so an old floor is visible
    security_floor: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know, kept as read

    @property
    def playbook_name(self) -> str | None:
        """The playbook as an operator names it: a shipped one by its name, a file by its file name."""
        if not self.playbook:
            return None
        p = Path(self.playbook.replace("\\", "/"))
        return p.stem if p.parent.name == "playbooks" and p.suffix in (".yml", ".yaml") else p.name

    @property
    def interrupted(self) -> bool:
        return self.state == "interrupted"

    def to_dict(self) -> dict[str, Any]:
        """run.json: every field that is set (a default is left out), then the unknown keys."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if f.name in ("id", "state", "started", "user", "inventory", "playbook", "limit", "probes") or value:
                out[f.name] = value
        return {**out, **{k: v for k, v in self.extra.items() if k not in out}}

    def header(self) -> dict[str, Any]:
        """fleet.json's `run` (orchestrator/schema/fleet.schema.json)."""
        d = self.to_dict()
        out = {k: d.get(k) for k in HEADER_KEYS if k != "stopped"}
        if self.stopped:
            out["stopped"] = dict(self.stopped)
        return out

    @classmethod
    def from_dict(cls, raw: Any) -> RunMeta:
        """run.json (or fleet.json's `run`) as stored; a value of the wrong type is left at its default."""
        d = raw if isinstance(raw, dict) else {}
        known = {f.name for f in fields(cls)} - {"extra"}
        meta = cls(extra={str(k): v for k, v in d.items() if k not in known})
        for name in ("id", "started", "finished", "user", "cwd", "limit", "playbook", "rejudged_from"):
            if isinstance(d.get(name), str):
                setattr(meta, name, d[name])
        if d.get("state") in STATES:
            meta.state = d["state"]
        for name in ("inventory", "hosts_order", "probes", "what_if"):
            if isinstance(d.get(name), list):  # names: anything else in them was not written by a run
                setattr(meta, name, [x for x in d[name] if isinstance(x, str)])
        for name in ("plan", "options", "collected", "summary", "security_floor"):
            if isinstance(d.get(name), dict):
                setattr(meta, name, d[name])
        if isinstance(d.get("merged_from"), list):
            meta.merged_from = [x for x in d["merged_from"] if isinstance(x, dict)]
        if isinstance(d.get("stopped"), dict):
            meta.stopped = {str(k): v for k, v in d["stopped"].items() if isinstance(v, int) and not isinstance(v, bool)}
        meta.imported = d.get("imported") is True
        return meta
