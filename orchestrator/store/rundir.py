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

import dataclasses
import errno
import functools
import getpass
import hashlib
import json
import os
import re
import shutil
import stat
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from orchestrator.engine.envelope import STORED_MAX_VALUES, loads_bounded
from orchestrator.engine.outcomes import Outcome
from orchestrator.engine.results import HostInput
from orchestrator.engine.runner import HostResult
from orchestrator.facts.normalize import WHOLE_STRINGS
from orchestrator.facts.textparse import RAW_COMMANDS
from orchestrator.facts.textsafe import one_line
from orchestrator.files.bounded import UnreadableInput, read_regular, unread
from orchestrator.store import atomic
from orchestrator.store.fleet_file import fleet_index_names, write_fleet
from orchestrator.store.history import load_fleet, new_run_id
from orchestrator.store.redaction import public_vars
from orchestrator.store.runmeta import RunMeta
from orchestrator.transport.base import DEFAULT_MAX_OUTPUT

_SAFE = re.compile(rb"[^A-Za-z0-9._-]")
# Run files hold what hosts told us and the inventory's public variables: the run's owner only.
RUN_FILE_MODE = 0o600
RUN_DIR_MODE = 0o700
_MAX_COMPONENT = 200  # bytes; NAME_MAX is 255


class UnsafeRunPath(OSError):
    """A path inside the run directory is a symbolic link or not a directory: nothing is written
    through it.  An OSError, so a run whose raw/ is tampered with stops like one that cannot write."""

    def __init__(self, path: Path, kind: str) -> None:
        super().__init__(errno.ELOOP if kind == "a symbolic link" else errno.ENOTDIR,
                         f"{path} is {kind}; fleetprobe does not write through it")


def safe_component(name: str) -> str:
    """A host name as one path component, injectively: two names never share a directory.

    Every UTF-8 byte outside [A-Za-z0-9._-] (and a leading dot) is percent-encoded, `%` itself
    included, so the encoding can be read back unambiguously; a lone surrogate keeps its own bytes.
    Past 200 bytes the name is cut and `~` and 16 hex digits of its SHA-256 are appended (`~`
    never appears in an encoding that was not cut); the empty name is `~`."""
    raw = name.encode("utf-8", "surrogatepass")
    s = _SAFE.sub(lambda m: b"%%%02X" % m.group()[0], raw).decode("ascii")
    if s.startswith("."):
        s = "%2E" + s[1:]
    if not s:
        return "~"
    if len(s) > _MAX_COMPONENT:
        cut = s[:_MAX_COMPONENT - 17]
        cut = cut[:cut.rfind("%")] if "%" in cut[-2:] else cut  # never half an escape
        s = f"{cut}~{hashlib.sha256(raw).hexdigest()[:16]}"
    return s


def real_dir(path: Path, mode: int = RUN_DIR_MODE) -> Path:
    """`path` as a directory of its own: created with `mode` if missing; UnsafeRunPath if it is a
    symbolic link (or anything but a directory), so no write under the run follows a planted link."""
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeRunPath(path, "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a directory")
    return path


def _link_or_copy(src: str, dst: str) -> None:
    """A raw file of another run, shared by a hard link where the filesystem allows it: raw files
    are written once, by atomic replace, and never changed in place, so the two runs cannot
    diverge through it; `probe merge` or `rejudge` of 10,000 hosts copied 1.4 GB (4.6 s of
    copying at 2,000 hosts, 0.2 s linking).  Across filesystems, or where links are refused
    (fs.protected_hardlinks), the file is copied."""
    try:
        if os.path.lexists(dst):  # copytree's dirs_exist_ok: the file is replaced, as a copy would
            os.unlink(dst)
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


@dataclass
class RunDirectory:
    """One run's directory: the only code that creates, writes or reads a run's files."""

    dir: Path
    meta: RunMeta

    @classmethod
    def create(cls, results_dir: Path, meta: RunMeta, run_dir: Path | None = None) -> RunDirectory:
        run_id = new_run_id()
        d = run_dir or (results_dir / run_id)
        d.parent.mkdir(parents=True, exist_ok=True)
        real_dir(d)
        if run_dir is None:
            os.chmod(d, RUN_DIR_MODE)
        raw = d / "raw"
        if os.path.lexists(raw):
            real_dir(raw)  # -o DIR given again: its raw/ must not be a planted link
        meta = dataclasses.replace(meta, id=d.name, state="running", started=_now(), user=_user(), cwd=_cwd())
        if run_dir is not None and run_dir.name.endswith(".staging"):
            meta.id = run_dir.name[1:-len(".staging")]
        w = cls(d, meta)
        w._write_meta()
        return w

    @classmethod
    def create_staged(cls, results_dir: Path, meta: RunMeta) -> RunDirectory:
        """A run built out of sight (rejudge): in `.<id>.staging/` until publish() renames it to
        `<id>`, so a full disk or a crash never leaves a half-copied run in the history."""
        run_id = new_run_id()
        return cls.create(results_dir, meta, results_dir / f".{run_id}.staging")

    def publish(self) -> None:
        """A staged run under its own name (one rename: it appears whole or not at all)."""
        final = self.dir.parent / self.meta.id
        os.rename(self.dir, final)
        self.dir = final

    def discard(self) -> None:
        """Remove a staged run that could not be finished."""
        if self.dir.name.endswith(".staging"):
            shutil.rmtree(self.dir, ignore_errors=True)

    @classmethod
    def open(cls, path: Path) -> RunDirectory:
        """A stored run; its run.json may be missing (a run killed before writing it): empty meta."""
        return cls(path, RunMeta.from_dict(read_meta(path)))

    # ------------------------------------------------------------------ writing

    def host_finished(self, res: HostResult, origin: dict[str, Any] | None = None, staged: Path | None = None) -> None:
        """A host's results.  `origin`: where results that did not come over our own transport were
        collected (a bundle's document: the host's identity and the file; an Ansible job event).
        `staged`: a directory of this run (stage_dir) where the probes' files were already written,
        by a worker that did not know the host's final name yet: moved in, not written again."""
        hdir = self._host_dir(res.host.name) if staged is None else self._adopt(staged, res.host.name)
        meta_path = hdir / "_host.json"
        summaries = {p: r.summary() for p, r in res.probes.items()}
        if meta_path.is_file():  # a second play on the same host adds its probes
            before = _json_object(meta_path).get("probes")
            summaries = {**(before if isinstance(before, dict) else {}), **summaries}
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
        atomic.write_json(meta_path, host_meta, durable=False, mode=RUN_FILE_MODE)
        if staged is None:
            write_probe_files(hdir, res)

    def stage_dir(self, key: str) -> Path:
        """A directory of this run, out of raw/, where a worker writes one host's probe files
        (write_probe_files) before host_finished(..., staged=) moves them under the host's name."""
        return real_dir(real_dir(self.dir / ".staged") / key)

    def drop_staged(self) -> None:
        """What is left of the staging directories (none once every host was moved in)."""
        shutil.rmtree(self.dir / ".staged", ignore_errors=True)

    def imported_host(self, host: HostInput, evidence: dict[str, Any]) -> None:
        """A host judged from text evidence: its facts, and the parsed evidence they came from."""
        hdir = self._host_dir(host.name)
        atomic.write_json(hdir / "_host.json", {"name": host.name, "address": host.address, "groups": host.groups,
                                                "vars": {}, "probes": host.probes}, mode=RUN_FILE_MODE)
        atomic.write_json(hdir / "_facts.json", evidence, mode=RUN_FILE_MODE)

    def copy_raw_from(self, other: RunDirectory) -> None:
        """Another run's raw data, so a re-judged run can be shown, diffed and re-judged again."""
        def links(directory: str, names: list[str]) -> list[str]:  # a planted link is not raw data
            return [n for n in names if os.path.islink(os.path.join(directory, n))]

        src = other.dir / "raw"
        if src.is_dir() and not src.is_symlink():
            try:
                shutil.copytree(src, self.dir / "raw", dirs_exist_ok=True, ignore=links, copy_function=_link_or_copy)
            except shutil.Error as e:  # copytree gathers its failures: the first one says why
                first = str(e.args[0][0][2]) if e.args and e.args[0] else str(e)
                raise OSError(errno.ENOSPC if "No space" in first else errno.EIO, first) from None

    def replan(self, meta: RunMeta) -> None:
        """The run's description once known (an import learns its plan from the hosts it stored):
        its id, state, start and user stay."""
        self.meta = dataclasses.replace(meta, id=self.meta.id, state=self.meta.state, started=self.meta.started,
                                        user=self.meta.user)
        self._write_meta()

    def stop(self, state: str = "complete", stopped: dict[str, int] | None = None) -> RunMeta:
        """The fan-out is over (or was stopped): the run's end time and state, which the judged
        fleet's header carries; written to run.json by finish()."""
        self.meta.state = state
        self.meta.finished = _now()
        self.meta.stopped = stopped if state == "interrupted" else None
        return self.meta

    def finish(self, fleet: dict[str, Any], state: str | None = None) -> None:
        """fleet.json (the judged fleet in its file form), findings.json, then run.json with the
        state stop() set (`state` when given) and the fleet's summary."""
        write_fleet(self.dir / "fleet.json", fleet, mode=RUN_FILE_MODE)
        atomic.write_json(self.dir / "findings.json", fleet["findings"], mode=RUN_FILE_MODE)
        if state is not None or self.meta.finished is None:
            self.stop(state or "complete", self.meta.stopped)
        self.meta.summary = fleet["summary"]
        self._write_meta()

    def mark(self, state: str) -> None:
        self.stop(state)
        self._write_meta()

    def _write_meta(self) -> None:
        atomic.write_json(self.dir / "run.json", self.meta.to_dict(), indent=1, mode=RUN_FILE_MODE)

    # ------------------------------------------------------------------ reading

    def fleet(self) -> dict[str, Any]:
        """fleet.json, host records read on demand through its index; RunNotFound when unreadable."""
        return load_fleet(self.dir)

    def host_inputs(self, with_data: bool = True, problems: list[str] | None = None) -> list[HostInput]:
        """The stored hosts; without data: names, groups, variables and probe summaries only."""
        return load_host_inputs(self.dir, with_data, problems)

    def _host_dir(self, name: str) -> Path:
        return real_dir(real_dir(self.dir / "raw") / safe_component(name))

    def _adopt(self, staged: Path, name: str) -> Path:
        """A staged host directory as the host's: renamed whole where the host has none yet, else
        its files moved in (later files replace earlier ones, as host_finished writes them)."""
        target = real_dir(self.dir / "raw") / safe_component(name)
        try:
            os.rename(staged, target)  # an empty target is replaced too
            return target
        except OSError as e:
            if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
        hdir = real_dir(target)
        for entry in os.listdir(staged):
            os.replace(staged / entry, hdir / entry)
        os.rmdir(staged)
        return hdir


def read_meta(run_dir: Path) -> dict[str, Any]:
    """run.json of a run, or {} when it is missing or unreadable."""
    return read_run_json(run_dir)[0] or {}


# run.json holds the plan and the hosts' order: about 40 bytes a host, so 100,000 hosts fit in a
# few MiB; a stored run's file past this was not written by fleetprobe and costs only its own reading.
RUN_JSON_MAX = 64 << 20


def read_run_json(run_dir: Path) -> tuple[dict[str, Any] | None, str]:
    """run.json of a run and '' , or None and why it cannot be read (history lists it with that)."""
    path = run_dir / "run.json"
    try:
        doc = json.loads(read_regular(path, RUN_JSON_MAX, "run.json").decode("utf-8"))
    except UnreadableInput as e:
        return None, unread("run.json", e)
    except UnicodeDecodeError as e:
        return None, f"run.json unreadable: {e}"
    except (ValueError, RecursionError) as e:
        return None, f"run.json is not valid JSON ({e})"
    if not isinstance(doc, dict):
        return None, "run.json is not a JSON object"
    return doc, ""


def _json_object(path: Path) -> dict[str, Any]:
    """A stored JSON object, or {} when the file is missing, unreadable, not JSON or not an object."""
    try:
        doc = json.loads(read_regular(path, RUN_JSON_MAX).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # removed under the command: its relative paths cannot be told apart later
        return None


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def write_probe_files(hdir: Path, res: HostResult, staged: bool = False) -> None:
    """A host's probe files (envelope, stdout, stderr of each probe) into its directory `hdir`.
    `staged`: a new staging directory (RunDirectory.stage_dir), which no reader sees before it is
    moved in whole: each file is written in place instead of replacing one atomically."""
    if staged:
        def put_json(path: Path, doc: Any) -> None:
            atomic.create_json(path, doc, RUN_FILE_MODE)

        def put(path: Path, data: bytes) -> None:
            atomic.create_bytes(path, data, RUN_FILE_MODE)
    else:
        def put_json(path: Path, doc: Any) -> None:
            atomic.write_json(path, doc, durable=False, mode=RUN_FILE_MODE)

        def put(path: Path, data: bytes) -> None:
            atomic.write_bytes(path, data, durable=False, mode=RUN_FILE_MODE)

    for name, pr in res.probes.items():
        if pr.envelope is not None:
            put_json(hdir / f"{name}.json", pr.envelope.to_dict())
        if pr.stdout:
            put(hdir / f"{name}.stdout", pr.stdout)
        if pr.stderr.strip():
            put(hdir / f"{name}.stderr", pr.stderr)


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


# The largest envelope file this program writes: its data came from at most the output cap of a
# probe's stdout (raw mode: one cap per text command), and the compact writer spells a character in
# at most 6 bytes ("\u001f"); the rest of the envelope is a few fields.  A raw file past it was not
# written here, and is refused unread: costing the host it names, not the judging worker's memory.
STORED_ENVELOPE_MAX = 6 * DEFAULT_MAX_OUTPUT * len(RAW_COMMANDS) + (1 << 20)


def read_envelope_data(hdir: Path, probes: list[str]) -> dict[str, dict[str, Any]]:
    """probe -> its envelope's data, from a host's raw directory (probes without a file: absent).

    Read within the same budget as a live answer (engine/envelope.py): a stored file is no more
    trusted than the host that sent it.  ValueError names the file that is not a usable envelope."""
    data = {}
    for p in probes:
        env_path = hdir / f"{p}.json"
        if not env_path.is_file():
            continue
        try:
            text = read_regular(env_path, STORED_ENVELOPE_MAX, "stored envelope").decode("utf-8")
            doc = loads_bounded(text, STORED_MAX_VALUES, WHOLE_STRINGS.get(p, ()))
        except UnreadableInput as e:
            raise ValueError(f"{env_path.name}: {e.why}") from None
        except (UnicodeDecodeError, RecursionError) as e:
            raise ValueError(f"{env_path.name}: {type(e).__name__}") from None
        except ValueError as e:
            raise ValueError(f"{env_path.name}: {str(e)[:160]}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("data", {}), dict):
            raise ValueError(f"{env_path.name} is not an envelope")
        data[p] = doc.get("data", {})
    return data


_OUTCOMES = frozenset(o.value for o in Outcome)


def _host_meta_problem(meta: dict[str, Any]) -> str:
    """Why a stored _host.json cannot be judged, or ''."""
    if not isinstance(meta.get("name"), str):
        return "its name is missing or not a string"
    probes = meta.get("probes", {})
    if not isinstance(probes, dict) or not all(
            isinstance(v, dict) and v.get("outcome") in _OUTCOMES and isinstance(v.get("reason", ""), str)
            for v in probes.values()):
        return "its probe summaries are not of the stored shape"
    if not isinstance(meta.get("groups", []), list) or not isinstance(meta.get("vars", {}), dict):
        return "its groups or variables are not of the stored shape"
    return ""


def load_host_inputs(run_dir: Path, with_data: bool = True, problems: list[str] | None = None) -> list[HostInput]:
    """Read a stored run's raw files back (for rejudge); hosts in the order they were recorded.
    Each host's envelopes are read when it is judged (HostInput.load_data); with_data=False: not at
    all, nor its facts (merge needs the hosts' groups only).

    Each host is read once, from one directory (see _one_per_name).  What cannot be read is said in
    `problems` (when given), one line each: a directory whose files are not of the stored shape,
    a second directory naming a host already read, a host of the run (run.json's hosts_order)
    with no usable directory at all; the others are read."""
    raw = run_dir / "raw"
    if not raw.is_dir() or raw.is_symlink():
        return []
    said: list[str] = problems if problems is not None else []
    found: list[_StoredHost] = []
    unreadable: set[str] = set()
    for hdir in sorted(raw.iterdir()):  # sorted: which of two copies of a host comes first is stable
        got = _read_host_dir(hdir, with_data)
        if isinstance(got, str):
            unreadable.add(hdir.name)
            said.append(f"raw/{hdir.name}: {got}; that host is left out")
        elif got is not None:
            found.append(got)
    kept = _one_per_name(found, said)
    meta = read_meta(run_dir)
    order = meta.get("hosts_order")
    names = [n for n in order if isinstance(n, str)] if isinstance(order, list) else []
    named = {s.dir: s.host.name for s in found}
    said.extend(_hosts_without_files(raw, names or fleet_index_names(run_dir / "fleet.json"),
                                     {s.host.name for s in kept}, named, unreadable, str(meta.get("state", ""))))
    pos = {n: i for i, n in enumerate(names)}
    kept.sort(key=lambda s: (pos.get(s.host.name, len(pos)), s.mtime))
    return [s.host for s in kept]


@dataclass(frozen=True)
class _StoredHost:
    """One host as read from its raw directory `dir` (its _host.json written at `mtime`)."""

    dir: str
    mtime: float
    host: HostInput


def _read_host_dir(hdir: Path, with_data: bool) -> _StoredHost | str | None:
    """A raw directory's host; why it cannot be judged; or None for what is no host's directory
    (a stray file, a planted link: hosts of the run left without one are said by name)."""
    meta_path = hdir / "_host.json"
    if hdir.is_symlink() or not meta_path.is_file():
        return None
    meta = _json_object(meta_path)
    why = "_host.json is unreadable or not a JSON object" if not meta else _host_meta_problem(meta)
    facts = None
    facts_path = hdir / "_facts.json"  # imported text evidence: facts, no envelopes
    if not why and with_data and facts_path.is_file():
        facts = _json_object(facts_path).get("facts")
        if not isinstance(facts, dict):
            why = "_facts.json is unreadable or holds no facts"
    if why:
        return why
    # the envelopes are read when the host is judged, one host at a time (a stored 10,000-host
    # run is gigabytes of them); one that does not read back then costs its host only
    load = functools.partial(read_envelope_data, hdir, [str(p) for p in meta.get("probes", {})]) \
        if with_data and facts is None else None
    return _StoredHost(hdir.name, meta_path.stat().st_mtime, HostInput(
        name=meta["name"], address=str(meta.get("address", meta["name"])), groups=[str(g) for g in meta.get("groups", [])],
        probes=meta.get("probes", {}), data={}, vars=meta.get("vars", {}), facts=facts, load_data=load))


def _one_per_name(found: list[_StoredHost], said: list[str]) -> list[_StoredHost]:
    """One directory per host name: two records of one host would judge and count it twice (a
    backup copy beside the original, a _host.json edited to name another host).  The directory
    the run itself writes for that name wins, else the first in name order; each other is said."""
    by_name: dict[str, list[_StoredHost]] = {}
    for s in found:
        by_name.setdefault(s.host.name, []).append(s)
    kept = []
    for name, copies in by_name.items():
        own = [s for s in copies if s.dir == safe_component(name)]
        best = own[0] if own else copies[0]
        kept.append(best)
        for other in copies:
            if other is not best:
                said.append(f"raw/{other.dir}: its _host.json names host {one_line(name)}, whose results raw/{best.dir} "
                            f"holds; raw/{other.dir} is left out (move it out of raw/ if it is a copy, or restore "
                            "its _host.json if it is another host's)")
    return kept


def _hosts_without_files(raw: Path, names: list[str], read: set[str], named: dict[str, str], unreadable: set[str],
                         state: str) -> list[str]:
    """One line for each host the run had (`names`) that no raw directory gave (`read`), unless
    its directory was already said to be unreadable; `named`: directory -> the host its
    _host.json names.  A run that was killed or could not write
    (state running/failed) never wrote the hosts it had not finished: one line counts them."""
    missing = [n for n in dict.fromkeys(names) if n not in read and safe_component(n) not in unreadable]
    if not missing:
        return []
    if state not in ("complete", "interrupted"):
        return [f"{len(missing)} of the run's {len(set(names))} host(s) had not finished when it stopped "
                f"(run.json state {one_line(state or 'missing')}); they have no results to judge and are left out"]
    return [f"host {one_line(n)}: {_why_no_files(raw / safe_component(n), named)}, so there is nothing of it to judge; "
            f"that host is left out (restore raw/{safe_component(n)} from a copy of the run to judge it)"
            for n in missing]


def _why_no_files(hdir: Path, named: dict[str, str]) -> str:
    """What stands where a host's raw directory should be (`named`: as in _hosts_without_files)."""
    where = f"raw/{hdir.name}"
    if hdir.name in named:
        return f"{where}/_host.json names host {one_line(named[hdir.name])} instead"
    if hdir.is_symlink():
        return f"{where} is a symbolic link, which fleetprobe does not read through"
    if not hdir.exists():
        return f"{where} is missing"
    if not hdir.is_dir():
        return f"{where} is not a directory"
    if not (hdir / "_host.json").exists():
        return f"{where}/_host.json is missing"
    return f"{where}/_host.json is not a file"


def elapsed_since(t0: float) -> float:
    return time.monotonic() - t0
