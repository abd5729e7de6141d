"""Playbooks: which job a run does (nightly audit, pre-migration check, triage).

A playbook is a YAML list of plays, Ansible-like:

    - name: nightly audit
      hosts: "gpu:!gpu07"          # same syntax as --limit
      probes: [host, {name: nvml, timeout: 20}]
      become: false
      forks: 50
      passive_only: true           # refuse probes that load the GPUs
      expect: {mig: false}         # Expectations keys
      findings:                    # overrides, each with a reason
        sensor.fan.not_reporting: {severity: info, reason: "liquid-cooled, no fans"}
      baselines:                   # the fleet baselines' thresholds (verdict/baseline.py), per figure
        h2d_gbps: {pct: 8, min_hosts: 3}

Loading is strict: the YAML is composed to nodes (safe tags only) so every error names the file
and line, unknown keys are errors with the closest known key suggested, duplicate keys are errors
(plain YAML loading silently keeps the last one), and an override naming no registered finding id
(a glob must match at least one) is an error: a typo would otherwise silently change nothing.
"""

from __future__ import annotations

import difflib
import fnmatch
import importlib.util
import os
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml

from orchestrator.engine.fabric_plan import FabricSpec, FabricSpecError, spec_from_mapping
from orchestrator.files.bounded import UnreadableInput, read_regular
from orchestrator.verdict.expectations import ExpectationError, Expectations
from orchestrator.verdict.overrides import Override

DEFAULT_PLAYBOOK = "audit"
OVERRIDE_SEVERITIES = ("fail", "warn", "info", "off")

_PLAY_KEYS = ("name", "hosts", "probes", "become", "forks", "expect", "findings", "passive_only", "fabric",
              "baselines")
_PROBE_KEYS = ("name", "args", "timeout")
_OVERRIDE_KEYS = ("severity", "reason")


# A playbook is a few kilobytes of YAML; a path to anything far bigger (a log, a disk image, a
# path a stored plan or a bundle document names) is refused unread.
MAX_PLAYBOOK = 1 << 20


class PlaybookError(ValueError):
    """A playbook is wrong; the message is `file:line: what is wrong` and what to do."""


@dataclass(frozen=True)
class ProbeStep:
    name: str
    args: dict[str, Any] = field(default_factory=dict)
    timeout: float | None = None  # seconds; None: the runner's default


@dataclass(frozen=True)
class Play:
    name: str
    hosts: str = "all"
    probes: tuple[ProbeStep, ...] = ()
    become: bool = False
    forks: int | None = None
    expect: Expectations = field(default_factory=Expectations)
    findings: dict[str, Override] = field(default_factory=dict)
    passive_only: bool = False
    line: int = 0
    # metric -> threshold fields over verdict/baseline.py THRESHOLDS ({"h2d_gbps": {"pct": 8.0}})
    baselines: dict[str, dict[str, Any]] = field(default_factory=dict)
    # a fabric qualification across the play's hosts after its probes (api/fabric.py); None: none
    fabric: FabricSpec | None = None

    @property
    def probe_names(self) -> list[str]:
        return [p.name for p in self.probes]


@dataclass(frozen=True)
class Playbook:
    path: Path
    plays: tuple[Play, ...]
    description: str = ""

    @property
    def name(self) -> str:
        return self.path.stem


# --------------------------------------------------------------------------- shipped playbooks

def playbooks_dir() -> Path:
    """Shipped playbooks: `playbooks/` beside the package in a checkout, else the installed
    `orchestrator.playbooks` package data (as the probes are shipped)."""
    candidates = [Path(__file__).resolve().parents[2] / "playbooks"]
    spec = importlib.util.find_spec("orchestrator.playbooks")
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p) for p in spec.submodule_search_locations]
    for candidate in candidates:
        if (candidate / f"{DEFAULT_PLAYBOOK}.yml").is_file():
            return candidate
    return candidates[0]


def _description(path: Path) -> str:
    """The first comment line of the file, which is where the shipped playbooks say what they are for."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return ""
    for line in lines:
        s = line.strip()
        if not s or s == "---":
            continue
        if s.startswith("#"):
            return s.lstrip("#").strip()
        break
    return ""


def shipped_playbooks() -> list[tuple[str, Path, str]]:
    """(name, path, description) of every shipped playbook, by name."""
    d = playbooks_dir()
    return [(p.stem, p, _description(p)) for p in sorted(d.glob("*.yml"))]


def find_playbook(ref: str | None) -> Path:
    """A `-p` argument: an existing file, or the name of a shipped playbook; None: the default."""
    ref = ref or DEFAULT_PLAYBOOK
    p = Path(ref)
    mode: int | None = None
    unreadable: Exception | None = None
    try:
        mode = os.stat(p).st_mode
    except (FileNotFoundError, NotADirectoryError):
        pass
    except (OSError, ValueError) as e:  # a directory we may not enter, a name with a NUL, too long a path
        unreadable = e
    if mode is not None and stat.S_ISREG(mode):
        return p
    shipped = {name: path for name, path, _ in shipped_playbooks()}
    if ref in shipped:
        return shipped[ref]
    if unreadable is not None:
        raise PlaybookError(f"{ref}: cannot read playbook: {getattr(unreadable, 'strerror', None) or unreadable}")
    if mode is not None:
        what = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a FIFO, socket or device)"
        raise PlaybookError(f"{ref}: {what}, not a playbook file")
    near = difflib.get_close_matches(ref, list(shipped), n=1)
    tip = f"; did you mean {near[0]!r}?" if near else ""
    raise PlaybookError(
        f"{ref}: no such playbook file, and no shipped playbook of that name "
        f"(shipped: {', '.join(sorted(shipped)) or 'none'}){tip}"
    )


# --------------------------------------------------------------------------- loading

def _probe_catalog() -> dict[str, bool]:
    from orchestrator.engine.payload import catalog

    return {name: spec.passive for name, spec in catalog().items()}


def _finding_ids() -> tuple[str, ...]:
    # Imported here: the registry pulls in every check module, which loading a playbook rarely needs.
    from orchestrator.verdict.checks import FINDING_IDS

    return FINDING_IDS


def load_playbook(path: str | Path, probes: Mapping[str, bool] | None = None,
                  finding_ids: Iterable[str] | None = None) -> Playbook:
    """Load and validate a playbook.

    `probes` maps each known probe name to whether it is passive; by default the shipped catalog.
    `finding_ids` are the ids overrides may name; by default the registry (checks.FINDING_IDS).
    Raises PlaybookError (`file:line: message`) on any problem.
    """
    path = Path(path)
    try:
        text = read_regular(path, MAX_PLAYBOOK, "playbook").decode("utf-8")
    except UnreadableInput as e:
        why = e.why[len("cannot read it: "):] if e.why.startswith("cannot read it: ") else e.why
        raise PlaybookError(f"{path}: cannot read playbook: {why}") from None
    except UnicodeDecodeError as e:
        raise PlaybookError(f"{path}: not a playbook: byte {e.start} is not UTF-8 text") from None
    return parse_playbook(text, path, probes, finding_ids)


def parse_playbook(text: str, path: str | Path = "<playbook>", probes: Mapping[str, bool] | None = None,
                   finding_ids: Iterable[str] | None = None) -> Playbook:
    path = Path(path)
    known = dict(probes) if probes is not None else _probe_catalog()
    ids = tuple(finding_ids) if finding_ids is not None else _finding_ids()
    v = _Validator(str(path), known, ids)
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        line = e.problem_mark.line + 1 if e.problem_mark else 0
        raise PlaybookError(f"{path}:{line}: not valid YAML: {e.problem}") from None
    except yaml.YAMLError as e:
        raise PlaybookError(f"{path}: not valid YAML: {e}") from None
    if root is None:
        raise PlaybookError(f"{path}: the playbook is empty; it must be a list of plays")
    if not isinstance(root, yaml.SequenceNode):
        v.fail(root, "a playbook is a list of plays (each item starts with '- name: ...')")
    if not root.value:
        v.fail(root, "the playbook has no plays")
    plays = tuple(v.play(node, i) for i, node in enumerate(root.value, 1))
    return Playbook(path=path, plays=plays, description=_description(path) if path.is_file() else "")


class _Validator:
    def __init__(self, where: str, probes: dict[str, bool], finding_ids: tuple[str, ...] = ()) -> None:
        self.where = where
        self.probes = probes
        self.finding_ids = finding_ids
        # A constructor for leaf values only: the safe loader's own scalar rules (ints, bools...).
        self._loader = yaml.SafeLoader("")

    def fail(self, node: yaml.Node, message: str) -> NoReturn:
        raise PlaybookError(f"{self.where}:{node.start_mark.line + 1}: {message}")

    def value(self, node: yaml.Node) -> Any:
        try:
            return self._loader.construct_document(node)
        except yaml.YAMLError as e:
            self.fail(node, f"cannot read value: {e}")

    def mapping(self, node: yaml.Node, what: str, keys: Iterable[str]) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        """Key -> (key node, value node); unknown and duplicate keys are errors."""
        if not isinstance(node, yaml.MappingNode):
            self.fail(node, f"{what} must be a mapping")
        allowed = list(keys)
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for knode, vnode in node.value:
            key = self.value(knode)
            if not isinstance(key, str):
                self.fail(knode, f"{what}: keys must be strings, got {key!r}")
            if key in out:
                self.fail(knode, f"{what}: key {key!r} given twice (first on line {out[key][0].start_mark.line + 1})")
            if key not in allowed:
                near = difflib.get_close_matches(key, allowed, n=1)
                tip = f"did you mean {near[0]!r}? " if near else ""
                self.fail(knode, f"{what}: unknown key {key!r}; {tip}known keys: {', '.join(allowed)}")
            out[key] = (knode, vnode)
        return out

    def typed(self, node: yaml.Node, what: str, kind: type | tuple[type, ...], desc: str) -> Any:
        val = self.value(node)
        # bool is an int in Python; `forks: yes` must not pass as 1.
        if isinstance(val, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
            self.fail(node, f"{what} must be {desc}, got {val!r}")
        if not isinstance(val, kind):
            self.fail(node, f"{what} must be {desc}, got {val!r}")
        return val

    def play(self, node: yaml.Node, index: int) -> Play:
        m = self.mapping(node, f"play {index}", _PLAY_KEYS)
        label = f"play {index}"
        name = f"play {index}"
        if "name" in m:
            name = str(self.typed(m["name"][1], f"{label}.name", str, "a string")).strip() or name
            label = f"play {name!r}"
        hosts = "all"
        if "hosts" in m:
            hosts = self.hosts(m["hosts"][1], f"{label}.hosts")
        fabric = self.fabric(m["fabric"][1], label) if "fabric" in m else None
        if "probes" not in m and fabric is None:
            self.fail(node, f"{label} has no 'probes' list; name at least one probe ({', '.join(sorted(self.probes))})")
        become = self.typed(m["become"][1], f"{label}.become", bool, "true or false") if "become" in m else False
        passive_only = (
            self.typed(m["passive_only"][1], f"{label}.passive_only", bool, "true or false")
            if "passive_only" in m else False
        )
        forks = None
        if "forks" in m:
            forks = self.typed(m["forks"][1], f"{label}.forks", int, "a positive integer")
            if forks < 1:
                self.fail(m["forks"][1], f"{label}.forks must be a positive integer, got {forks}")
        if fabric is not None and passive_only:
            self.fail(m["fabric"][0], f"{label} is passive_only but asks for a fabric qualification, which loads every "
                                      "HCA and GPU; remove one of them")
        probes = self.probe_list(m["probes"][1], label, passive_only) if "probes" in m else ()
        expect = Expectations()
        if "expect" in m:
            vnode = m["expect"][1]
            try:
                expect = Expectations.from_mapping(self.value(vnode), where=f"{label}.expect")
            except ExpectationError as e:
                self.fail(vnode, str(e))
        overrides = self.overrides(m["findings"][1], label) if "findings" in m else {}
        baselines = self.baselines(m["baselines"][1], label) if "baselines" in m else {}
        return Play(name=name, hosts=hosts, probes=probes, become=become, forks=forks, expect=expect,
                    findings=overrides, passive_only=passive_only, line=node.start_mark.line + 1,
                    baselines=baselines, fabric=fabric)

    def fabric(self, node: yaml.Node, label: str) -> FabricSpec:
        try:
            return spec_from_mapping(self.value(node))
        except FabricSpecError as e:
            self.fail(node, f"{label}: {e}")

    def baselines(self, node: yaml.Node, label: str) -> dict[str, dict[str, Any]]:
        """`baselines: {metric: {pct, delta, z, min_hosts, min_gpus}}`: a figure the fleet baselines
        compare (verdict/baseline.py METRICS) and the thresholds that replace the table's."""
        from orchestrator.verdict.baseline import BY_KEY, THRESHOLD_KEYS

        out: dict[str, dict[str, Any]] = {}
        for metric, (_knode, vnode) in self.mapping(node, f"{label}.baselines", BY_KEY).items():
            fields: dict[str, Any] = {}
            for key, (_kn, fnode) in self.mapping(vnode, f"{label}.baselines.{metric}", THRESHOLD_KEYS).items():
                what = f"{label}.baselines.{metric}.{key}"
                if key.startswith("min_"):
                    v = self.typed(fnode, what, int, "a whole number of at least 1")
                    if v < 1:
                        self.fail(fnode, f"{what} must be at least 1, got {v}")
                else:
                    v = float(self.typed(fnode, what, (int, float), "a number >= 0"))
                    if not v >= 0:
                        self.fail(fnode, f"{what} must be a number >= 0, got {v}")
                fields[key] = v
            out[metric] = fields
        return out

    def hosts(self, node: yaml.Node, what: str) -> str:
        val = self.value(node)
        # Ansible accepts a list of patterns as well as one "a:b:!c" string.
        if isinstance(val, list) and val and all(isinstance(x, str) and x.strip() for x in val):
            return ":".join(x.strip() for x in val)
        if isinstance(val, str) and val.strip():
            return val.strip()
        self.fail(node, f"{what} must be a host pattern like 'all', 'gpu:!gpu07' or a list of patterns")

    def probe_list(self, node: yaml.Node, label: str, passive_only: bool) -> tuple[ProbeStep, ...]:
        if not isinstance(node, yaml.SequenceNode) or not node.value:
            self.fail(node, f"{label}.probes must be a non-empty list of probe names or {{name, args, timeout}}")
        steps: list[ProbeStep] = []
        seen: dict[str, int] = {}
        for item in node.value:
            if isinstance(item, yaml.ScalarNode):
                step = ProbeStep(name=self.probe_name(item, label))
            else:
                m = self.mapping(item, f"{label}.probes item", _PROBE_KEYS)
                if "name" not in m:
                    self.fail(item, f"{label}.probes item has no 'name'")
                pname = self.probe_name(m["name"][1], label)
                args: dict[str, Any] = {}
                if "args" in m:
                    args = self.typed(m["args"][1], f"{label}.probes.{pname}.args", dict, "a mapping")
                    bad = [k for k in args if not isinstance(k, str)]
                    if bad:
                        self.fail(m["args"][1], f"{label}.probes.{pname}.args: keys must be strings, got {bad[0]!r}")
                timeout = None
                if "timeout" in m:
                    t = self.typed(m["timeout"][1], f"{label}.probes.{pname}.timeout", (int, float),
                                   "a number of seconds")
                    if t <= 0:
                        self.fail(m["timeout"][1], f"{label}.probes.{pname}.timeout must be > 0 seconds, got {t}")
                    timeout = float(t)
                step = ProbeStep(name=pname, args=args, timeout=timeout)
            if step.name in seen:
                self.fail(item, f"{label}: probe {step.name!r} listed twice (first on line {seen[step.name]})")
            seen[step.name] = item.start_mark.line + 1
            if passive_only and not self.probes[step.name]:
                self.fail(item, f"{label} is passive_only but probe {step.name!r} is not passive (it puts load on "
                                f"the GPUs); remove it or set passive_only: false")
            steps.append(step)
        return tuple(steps)

    def probe_name(self, node: yaml.Node, label: str) -> str:
        name = self.value(node)
        if not isinstance(name, str) or name not in self.probes:
            near = difflib.get_close_matches(str(name), list(self.probes), n=1)
            tip = f"did you mean {near[0]!r}? " if near else ""
            self.fail(node, f"{label}: unknown probe {name!r}; {tip}known probes: {', '.join(sorted(self.probes))}")
        return str(name)

    def overrides(self, node: yaml.Node, label: str) -> dict[str, Override]:
        if not isinstance(node, yaml.MappingNode):
            self.fail(node, f"{label}.findings must map finding ids to {{severity, reason}}")
        out: dict[str, Override] = {}
        for knode, vnode in node.value:
            fid = self.value(knode)
            if not isinstance(fid, str) or not fid.strip():
                self.fail(knode, f"{label}.findings: keys are finding ids like 'pcie.link.downgraded', got {fid!r}")
            if fid in out:
                self.fail(knode, f"{label}.findings: {fid!r} given twice")
            what = f"{label}.findings.{fid}"
            m = self.mapping(vnode, what, _OVERRIDE_KEYS)
            if "severity" not in m:
                self.fail(vnode, f"{what} needs a severity ({', '.join(OVERRIDE_SEVERITIES)})")
            sev = self.value(m["severity"][1])
            if sev is False:  # YAML 1.1 reads a bare `off` as false
                sev = "off"
            if sev not in OVERRIDE_SEVERITIES:
                self.fail(m["severity"][1], f"{what}.severity must be one of {', '.join(OVERRIDE_SEVERITIES)}, got {sev!r}")
            reason = self.value(m["reason"][1]) if "reason" in m else None
            if not isinstance(reason, str) or not reason.strip():
                self.fail(vnode, f"{what} needs a reason: say why this finding is changed, for the next reader")
            self.finding_id(knode, fid, label)
            out[fid] = Override(severity=str(sev), reason=reason.strip())
        return out

    def finding_id(self, node: yaml.Node, fid: str, label: str) -> None:
        """An override must name a registered id, or be a glob matching at least one."""
        ids = self.finding_ids
        if fid in ids:
            return
        is_glob = any(c in fid for c in "*?[")
        if is_glob and any(fnmatch.fnmatchcase(i, fid) for i in ids):
            return
        near = difflib.get_close_matches(fid, list(ids), n=1, cutoff=0.6)
        if not near:
            # A wrong area or a wrong tail: suggest an id sharing the first part ("sensor.", "pcie.").
            head = fid.split(".", 1)[0]
            near = [i for i in ids if i.split(".", 1)[0] == head][:1]
        tip = f"; did you mean {near[0]!r}?" if near else ""
        what = "matches no finding id" if is_glob else "is not a finding id"
        self.fail(node, f"{label}.findings: {fid!r} {what}{tip} (the ids are listed in docs/findings.md)")
