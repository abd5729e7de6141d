"""Run history under one results directory: list, resolve a RUN reference, retention, predecessor.

Run directories are named `<UTC timestamp>-<short id>` (`20261130T021500Z-3f9a1c`), so their names
sort by time.  Listing never raises on a bad run: a crashed or half-written run is listed as
partial with the reason, because the nightly history must stay readable after a crash.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from orchestrator.files.bounded import UnreadableInput, unread
from orchestrator.store.fleet_file import READ_VERSIONS, read_fleet, read_fleet_bounded

RUN_DIR_RE = re.compile(r"^(\d{8}T\d{6}Z)-([0-9a-z]{4,16})$")
_TS_FORMAT = "%Y%m%dT%H%M%SZ"
_FAILED_OUTCOMES = ("failed", "invalid_output", "timeout")


class RunNotFound(LookupError):
    """A RUN reference matches no run, or more than one; the message lists what there is."""


@dataclass
class RunSummary:
    id: str
    path: Path
    started: datetime | None
    inventory: list[str] = field(default_factory=list)
    playbook: str | None = None
    limit: str | None = None
    hosts: int = 0
    ok: int = 0
    unsupported: int = 0  # answered, but a probe could not measure there (no GPU library): not ok, as RECAP says
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0  # hosts the run never probed (stopped before they started)
    interrupted: int = 0  # hosts the run cut off mid-probe
    findings: dict[str, int] = field(default_factory=lambda: {"fail": 0, "warn": 0, "info": 0})
    partial: bool = False  # files missing or unreadable
    problem: str = ""  # why the run is partial
    recorded_state: str | None = None  # run.json's state: running, complete, interrupted, failed
    # the hosts' health as the verdict decided it (failed, unreachable, incomplete, degraded,
    # healthy): the counts above are the probes' transport outcomes
    health: dict[str, int] = field(default_factory=dict)
    rejudged_from: str | None = None
    # a rejudge under other inputs than its source's (RunMeta.what_if): the options it changed
    what_if: list[str] = field(default_factory=list)

    @property
    def state(self) -> str:
        """complete (finished, readable), interrupted (stopped by Ctrl-C/SIGTERM, what it got is
        readable) or partial (crashed, still running, or files missing)."""
        if self.partial or self.recorded_state not in ("complete", "interrupted"):
            return "partial"
        return self.recorded_state

    @property
    def complete(self) -> bool:
        return self.state == "complete"

    @property
    def playbook_name(self) -> str | None:
        """The playbook as an operator names it: a shipped one by its name, a file by its file name."""
        if not self.playbook:
            return None
        p = Path(self.playbook)
        return p.stem if p.parent.name == "playbooks" and p.suffix in (".yml", ".yaml") else p.name

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "path": str(self.path),
                "started": self.started.isoformat() if self.started else None, "state": self.state,
                "inventory": self.inventory, "playbook": self.playbook, "limit": self.limit, "hosts": self.hosts,
                "ok": self.ok, "unsupported": self.unsupported, "failed": self.failed, "unreachable": self.unreachable, "skipped": self.skipped,
                "interrupted": self.interrupted, "findings": dict(self.findings), "health": dict(self.health),
                "rejudged_from": self.rejudged_from, "what_if": list(self.what_if),
                "partial": self.partial, "problem": self.problem}

    @property
    def real(self) -> bool:
        """A state of the fleet, not a what-if: a run history may take it for the run before another."""
        return not self.what_if


def default_results_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "fleetprobe" / "runs"


def results_dir_named(results_dir: Path) -> str:
    """The results directory as a message names it: with the variable it came from, when it is
    the default one (a cron job's environment is not the one its author tested in)."""
    if os.environ.get("XDG_STATE_HOME") and Path(results_dir) == default_results_dir():
        return f"{results_dir} (from XDG_STATE_HOME={os.environ['XDG_STATE_HOME']})"
    return str(results_dir)


def new_run_id(now: datetime | None = None) -> str:
    """The name for a new run directory: UTC time to the second, then the milliseconds and 6 random
    hex digits.  Names sort in start order even for two runs in one second (cron retries, tests),
    which `latest` and `previous_run` rely on; the random part keeps simultaneous runs apart."""
    now = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return f"{now.strftime(_TS_FORMAT)}-{now.microsecond // 1000:03d}{secrets.token_hex(3)}"


def _time_of(run_id: str) -> datetime | None:
    m = RUN_DIR_RE.match(run_id)
    if not m:
        return None
    return datetime.strptime(m.group(1), _TS_FORMAT).replace(tzinfo=timezone.utc)


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def _read_json(path: Path, read: Callable[[Path], Any] | None = None) -> tuple[dict[str, Any] | None, str]:
    try:
        data = read(path) if read is not None else json.loads(path.read_text(encoding="utf-8"))
    except UnreadableInput as e:
        return None, unread(path.name, e)
    except FileNotFoundError:
        return None, f"no {path.name}"
    except (OSError, UnicodeDecodeError) as e:
        return None, f"{path.name} unreadable: {e}"
    except json.JSONDecodeError as e:
        return None, f"{path.name} is not valid JSON ({e})"
    except ValueError as e:  # valid JSON, but a schema-2 value that does not decode (store/compact.py)
        return None, f"{path.name} is unreadable: {e}"
    if not isinstance(data, dict):
        return None, f"{path.name} is not a JSON object"
    return data, ""


def _read_run_json(run_dir: Path) -> tuple[dict[str, Any] | None, str]:
    """run.json through the run directory's one owner (store/rundir.py, which imports this module)."""
    from orchestrator.store.rundir import read_run_json

    return read_run_json(run_dir)


def _run_dirs(results_dir: Path) -> list[Path]:
    try:
        entries = list(results_dir.iterdir())
    except FileNotFoundError:
        return []
    except NotADirectoryError:
        raise RunNotFound(f"{results_dir_named(results_dir)} is not a directory; give --results DIR") from None
    return sorted((p for p in entries if p.is_dir() and RUN_DIR_RE.match(p.name)), key=lambda p: p.name)


def summarize_run(path: Path) -> RunSummary:
    """One run directory -> its summary (partial, with the reason, when files are missing or bad)."""
    s = RunSummary(id=path.name, path=path, started=_time_of(path.name))
    problems: list[str] = []
    run, why = _read_run_json(path)
    if run is None:
        problems.append(why)
    summary = run.get("summary") if run else None
    if run and "summary" in run and _summary_problem(summary):
        problems.append(f"run.json is unreadable: its summary {_summary_problem(summary)}")
        summary = None
    fleet: dict[str, Any] | None = None
    if problems and run is not None:
        pass  # listed as unreadable; its fleet.json is not trusted to stand in for it
    elif isinstance(summary, dict) and isinstance(summary.get("outcomes"), dict) and (path / "fleet.json").is_file():
        # run.json holds the fleet's summary (RunDirectory.finish): listing the history must not parse
        # every run's fleet.json (120 MB at 1,000 GPU servers, and `probe run` lists it to find
        # the previous run for drift)
        _tally(summary, s)
    else:
        fleet, fwhy = _read_json(path / "fleet.json", read_fleet)
        if fleet is None:
            problems.append(fwhy)
    meta = run or (fleet.get("run") if fleet and isinstance(fleet.get("run"), dict) else None) or {}
    s.started = _parse_time(meta.get("started")) or s.started
    inv = meta.get("inventory")
    s.inventory = [str(x) for x in inv] if isinstance(inv, list) else ([str(inv)] if inv else [])
    s.playbook = str(meta["playbook"]) if meta.get("playbook") else None
    s.limit = str(meta["limit"]) if meta.get("limit") else None
    # read as RunMeta reads them: a value of another type was not written by a run
    s.rejudged_from = meta["rejudged_from"] if isinstance(meta.get("rejudged_from"), str) else None
    what_if = meta.get("what_if")
    s.what_if = [x for x in what_if if isinstance(x, str)] if isinstance(what_if, list) else []
    state = (run or {}).get("state")
    # a run.json without a state (written before runs recorded one) with its fleet.json: complete
    s.recorded_state = str(state) if state else "complete"
    if fleet is not None:
        try:
            _count(fleet, s)
        except (TypeError, ValueError, AttributeError) as e:
            problems.append(f"fleet.json has an unexpected shape ({e})")
    if run is not None and run.get("state") in ("running", "failed") and not (path / "fleet.json").is_file():
        problems.append(PARTIAL_RUN)
    s.partial = bool(problems)
    s.problem = "; ".join(problems)
    return s


PARTIAL_RUN = "partial run: rejudge it (`probe rejudge RUN` rebuilds its judgement from raw/)"


def _summary_problem(summary: Any) -> str:
    """What is wrong with a run.json summary (as RunDirectory.finish writes it), or ''."""
    if not isinstance(summary, dict):
        return f"is {type(summary).__name__}, not an object"
    if not isinstance(summary.get("hosts"), int) or isinstance(summary.get("hosts"), bool):
        return "has no host count"
    for key in ("outcomes", "findings"):
        part = summary.get(key)
        if not isinstance(part, dict) or not all(isinstance(v, int) and not isinstance(v, bool) for v in part.values()):
            return f"{key} are not counts"
    return ""


def _tally(summary: dict[str, Any], s: RunSummary) -> None:
    """Counts from a fleet summary (run.json's, or one made from fleet.json's hosts)."""
    outcomes = summary.get("outcomes") or {}
    num = {k: v for k, v in outcomes.items() if isinstance(v, int)}
    s.hosts = summary["hosts"] if isinstance(summary.get("hosts"), int) else sum(num.values())
    s.unreachable = num.get("unreachable", 0)
    s.failed = sum(num.get(o, 0) for o in _FAILED_OUTCOMES)
    s.ok = num.get("ok", 0)
    s.unsupported = num.get("unsupported", 0)
    s.skipped = num.get("skipped", 0)
    s.interrupted = num.get("interrupted", 0)
    health = summary.get("health")
    if isinstance(health, dict):
        s.health = {str(k): v for k, v in health.items() if isinstance(v, int) and not isinstance(v, bool)}
    by_sev = summary.get("findings")
    if isinstance(by_sev, dict):
        for sev in s.findings:
            s.findings[sev] = int(by_sev.get(sev, 0) or 0)


def _count(fleet: dict[str, Any], s: RunSummary) -> None:
    hosts = [h for h in fleet.get("hosts") or [] if isinstance(h, dict)]
    by_sev = (fleet.get("summary") or {}).get("findings")
    if not isinstance(by_sev, dict):
        by_sev = Counter(f.get("severity") for f in fleet.get("findings") or [] if isinstance(f, dict))
    health = Counter(h["health"].get("state") for h in hosts if isinstance(h.get("health"), dict))
    _tally({"hosts": len(hosts), "outcomes": Counter(h.get("outcome") for h in hosts), "findings": by_sev,
            "health": {str(k): v for k, v in health.items() if k}}, s)


def list_runs(results_dir: str | Path) -> list[RunSummary]:
    """Every run under `results_dir`, oldest first."""
    return [summarize_run(p) for p in _run_dirs(Path(results_dir))]


def resolve_run(results_dir: str | Path, ref: str | None = None) -> Path:
    """A RUN reference -> its directory.

    `None`/`latest`: the newest run; `-1` the newest, `-2` the one before...; a run directory path;
    otherwise a prefix of a run id or of its short id (the part after the timestamp).
    """
    results_dir = Path(results_dir)
    runs = _run_dirs(results_dir)
    ref = (ref or "latest").strip()
    if ref == "latest" or re.fullmatch(r"-\d+", ref):
        n = 1 if ref == "latest" else int(ref[1:])
        if not runs:
            raise RunNotFound(f"no runs under {results_dir}")
        if n < 1 or n > len(runs):
            raise RunNotFound(f"{ref}: there are only {len(runs)} run(s) under {results_dir}")
        return runs[-n]
    p = Path(ref)
    if p.is_dir() and ((p / "run.json").exists() or (p / "fleet.json").exists() or RUN_DIR_RE.match(p.name)):
        return p
    hits = [r for r in runs if r.name.startswith(ref) or r.name.split("-", 1)[1].startswith(ref)]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        recent = ", ".join(r.name for r in runs[-3:]) or "none"
        raise RunNotFound(f"no run matches {ref!r} under {results_dir} (latest: {recent}); "
                          f"use `probe runs` to list them")
    raise RunNotFound(f"{ref!r} matches {len(hits)} runs ({', '.join(h.name for h in hits[:5])}"
                      f"{', ...' if len(hits) > 5 else ''}); give more of the id")


def previous_run(results_dir: str | Path, run: str | Path, same_inventory: bool = True,
                 skipped: list[RunSummary] | None = None) -> RunSummary | None:
    """The newest complete run before `run` (a ref or a path); with `same_inventory`, of the same
    inventory, playbook and --limit: the run drift should compare with.  An interrupted or
    partial run, or one that probed other hosts or other probes, is never the default baseline
    (it would make everything it did not measure look new or resolved); nor is a what-if (a
    rejudge under other expectations, playbook, baseline or floor): it says what the fleet would
    be judged under other inputs, not what it was.

    `skipped` (when given) receives the partial or unreadable runs newer than the one chosen, so
    the caller can say which baseline it passed over and why."""
    path = resolve_run(results_dir, str(run))
    me = summarize_run(path)

    def same(s: RunSummary) -> bool:
        return (s.inventory, s.playbook_name, s.limit) == (me.inventory, me.playbook_name, me.limit)

    earlier = [s for s in list_runs(results_dir) if s.id < path.name and s.real]
    if same_inventory:
        earlier = [s for s in earlier if s.partial or same(s)]
    while earlier and earlier[-1].partial:
        bad = earlier.pop()
        if skipped is not None:
            skipped.append(bad)
    complete = [s for s in earlier if s.complete and not s.partial and (not same_inventory or same(s))]
    return complete[-1] if complete else None


def parse_keep(spec: str) -> tuple[int | None, int | None]:
    """`--keep` -> (count, days): "30" keeps 30 runs, "14d" keeps 14 days, "30,14d" both."""
    count: int | None = None
    days: int | None = None
    for part in (p.strip() for p in str(spec).split(",")):
        m = re.fullmatch(r"(\d+)(d?)", part)
        if not m or int(m.group(1)) < 1:
            raise ValueError(f"--keep {spec!r}: give a number of runs (30), of days (14d), or both (30,14d)")
        if m.group(2):
            days = int(m.group(1))
        else:
            count = int(m.group(1))
    return count, days


def prune(results_dir: str | Path, keep_count: int | None = None, keep_days: float | None = None,
          now: datetime | None = None, protect: tuple[str, ...] = ()) -> list[Path]:
    """Delete runs beyond the newest `keep_count` or older than `keep_days`; return what was removed.

    The newest run and the runs named in `protect` (a baseline) are always kept, so a long pause
    in cron never leaves drift detection without a predecessor.  Only directories named like runs
    are ever touched.  Call it while holding the RunLock.
    """
    if keep_count is not None and keep_count < 1:
        raise ValueError("keep_count must be at least 1")
    if keep_days is not None and keep_days <= 0:
        raise ValueError("keep_days must be positive")
    runs = _run_dirs(Path(results_dir))
    if not runs or (keep_count is None and keep_days is None):
        return []
    now = now or datetime.now(timezone.utc)
    doomed: list[Path] = []
    for i, path in enumerate(runs[:-1]):  # never the newest
        if path.name in protect:
            continue
        too_many = keep_count is not None and len(runs) - i > keep_count
        when = _time_of(path.name)
        too_old = keep_days is not None and when is not None and now - when > timedelta(days=keep_days)
        if too_many or too_old:
            doomed.append(path)
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return doomed


def load_fleet(run_dir: str | Path) -> dict[str, Any]:
    """A run's fleet.json; RunNotFound with the reason when it is missing or unreadable."""
    # hosts are read one at a time on demand when fleet.json has its index (orchestrator/store/fleet_file.py)
    data, why = _read_json(Path(run_dir) / "fleet.json", read_fleet)
    if data is None:
        raise RunNotFound(f"{run_dir}: {why}; {PARTIAL_RUN}")
    try:
        problem = fleet_problem(data)
    except ValueError as e:  # a host record read through the index that does not parse or decode
        problem = str(e)
    if problem:
        raise RunNotFound(f"{run_dir}: fleet.json is unreadable: {problem}; {PARTIAL_RUN}")
    return data


# The findings of a past run read for drift and repeat offenders: 10 for each host of a fleet of
# 2,000 (reading them costs about 60 us and 3 KB each).  A run of more (a hostile or broken one:
# 600,000 findings, 117 MiB, made the next 3-host run take 22.7 s and 962 MiB) is judged on its
# first this many, the rest of its file is not read, and the run says so.
HISTORY_FINDINGS = 20_000


def load_past_fleet(run_dir: str | Path, max_findings: int = HISTORY_FINDINGS) -> tuple[dict[str, Any], str]:
    """load_fleet for a reader of the history (store/fleet_file.py:read_fleet_bounded): the run's
    first `max_findings` findings, no part of it read past its bound, and a note ('' when nothing
    was left out) saying what drift and repeat offenders were judged on."""
    run_dir = Path(run_dir)
    try:
        read = read_fleet_bounded(run_dir / "fleet.json", max_findings)
    except UnreadableInput as e:
        raise RunNotFound(f"{run_dir}: {unread('fleet.json', e)}; {PARTIAL_RUN}") from None
    except FileNotFoundError:
        raise RunNotFound(f"{run_dir}: no fleet.json; {PARTIAL_RUN}") from None
    except (OSError, ValueError) as e:
        raise RunNotFound(f"{run_dir}: fleet.json is unreadable: {e}; {PARTIAL_RUN}") from None
    if not isinstance(read.doc, dict):
        raise RunNotFound(f"{run_dir}: fleet.json is not a JSON object; {PARTIAL_RUN}")
    try:
        problem = fleet_problem(read.doc)
    except ValueError as e:  # a host record read through the index that does not parse or decode
        problem = str(e)
    if problem:
        raise RunNotFound(f"{run_dir}: fleet.json is unreadable: {problem}; {PARTIAL_RUN}")
    note = (f"run {run_dir.name}: its findings were more than {max_findings:,}: drift and repeat offenders are "
            f"judged on the first {max_findings:,} (the rest of its fleet.json is not read)") if read.more else ""
    return read.doc, note


def fleet_problem(fleet: dict[str, Any]) -> str:
    """What makes a stored fleet document unreadable as a whole, or ''.  A host record, finding or
    class that is not of its stored shape costs only itself: the judged fleet's reader
    (verdict/result.py:FleetResult.from_document) leaves it out and says so."""
    version = fleet.get("schema_version", 1)
    if type(version) is not int or version not in READ_VERSIONS:
        return (f"its schema_version is {json.dumps(version)[:40]}, which this fleetprobe does not read "
                f"(it reads {', '.join(map(str, READ_VERSIONS))}); a newer fleetprobe wrote it, or it was edited")
    if not isinstance(fleet.get("run", {}), dict) or not isinstance(fleet.get("summary", {}), dict):
        return "its run or summary is not an object"
    hosts = fleet.get("hosts")
    if not isinstance(hosts, (list, Sequence)) or isinstance(hosts, (str, bytes)):
        return "its hosts are not a list"
    for key in ("findings", "classes", "silenced"):
        if not isinstance(fleet.get(key, []), list):
            return f"its {key} are not a list"
    return ""


def diff_pair(results_dir: str | Path, a: str | None = None, b: str | None = None) -> tuple[Path, Path]:
    """The two runs `probe diff [A] [B]` compares: both given; A and the latest; or, with neither,
    the newest complete run and the complete run before it of the same inventory, playbook and limit,
    what-ifs passed over (named, they are compared like any run)."""
    if a and b:
        return resolve_run(results_dir, a), resolve_run(results_dir, b)
    if a:
        return resolve_run(results_dir, a), resolve_run(results_dir, "latest")
    complete = [s for s in list_runs(results_dir) if s.complete and s.real]
    if not complete:
        raise RunNotFound(f"no complete run under {results_dir} to compare")
    new = complete[-1].path
    prev = previous_run(results_dir, new)
    if prev is None:
        raise RunNotFound(f"{new.name} has no earlier complete run of the same inventory to compare with; "
                          f"name two runs: probe diff A B")
    return prev.path, new
