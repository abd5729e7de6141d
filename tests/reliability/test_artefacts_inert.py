"""Generated artefacts are inert (issue 45): whatever a stored run says (its id, its hosts' names,
finding ids, subjects) reaches the playbook of `probe remediate`, the `--slurm-drain` lines and the
Ansible inventory as data.  The shared corpus (tests/support/hostile_strings.py) goes in through
real stored runs (a fleet.json on disk, as a tampered run or a merged shard would have it), and
the real `ansible-playbook` checks, lists the hosts of, and runs each playbook against stub
commands: no lookup runs (the marker file never appears), every play targets exactly the plan's
hosts among many decoys, and each logged argv holds the hostile strings verbatim as one argument.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api.stored import load_result
from orchestrator.inventory.targets import name_problem
from orchestrator.present.outputs.ansible_inventory import write_inventory
from orchestrator.present.outputs.remediation import write_playbook
from orchestrator.present.outputs.slurm_drain import DRAIN_GUARD, render_drain
from orchestrator.store.compact import read_plain
from orchestrator.store.fleet_file import write_fleet
from orchestrator.verdict import remedy
from orchestrator.verdict.findings import Severity
from orchestrator.verdict.result import FleetResult
from tests.support.ansible import ansible_list
from tests.support.collected import run_script
from tests.support.hostile import cli_env, run_cli
from tests.support.hostile_strings import ALL, CLASSES, ansible_yaml, armed

ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
PLAN = ["node01", "node02", "node03", "node04"]  # reboot, reset a GPU, restart a service, a hostile finding id
DECOYS = ["node00", "node0", "node001", "node05", "node10", "node11", "node12", "node20", "node21", "node30",
          "evil01", "evil02", "node01x", "xnode01", "node-01", "node_02", "Node03", "n04"]
FIDS = [f"fid{j:02d}" for j in range(1, 1 + max(len(m) for m in CLASSES.values()))]
PLAYS = {"drain in Slurm": PLAN, "reset GPUs where idle": ["node02"], "restart services": ["node03"],
         "reboot": ["node01"], "verify and resume in Slurm": ["node01", "node02", "node03"]}


def _finding(host: str, fid: str, subject: str = "s", devices: list[dict[str, Any]] | None = None
             ) -> dict[str, Any]:
    return {"id": fid, "host": host, "severity": "fail", "kind": "fault", "subject": subject, "message": "m",
            "evidence": [], "hint": "", "devices": devices or []}


# what a run stores of the GPU a reset finding names (remediation reads it, never the subject)
GPU3 = [{"kind": "gpu", "gpu": 3, "bus_id": "0000:5d:00.0"}]


def _stored_run(where: Path, hostile: str) -> Path:
    """A run directory whose fleet.json carries `hostile` as its run id, a subject, a finding id and
    the name of a failed host, beside four honest failed hosts and healthy ones."""
    names = [*PLAN, hostile, *(f"ok{i:02d}" for i in range(15))]
    doc = {"schema_version": 1, "run": {"id": hostile}, "summary": {}, "classes": [],
           "hosts": [{"name": n, "outcome": "ok", "class": "8xH100"} for n in names],
           "findings": [_finding("node01", "gpu.lost", hostile),
                        _finding("node02", "gpu.row_remap.pending", f"GPU3 (0000:5d:00.0) {hostile}", GPU3),
                        _finding("node03", "nvlink.fabric.incomplete", hostile),
                        _finding("node04", hostile, hostile),
                        _finding(hostile, "gpu.lost", hostile)]}
    where.mkdir(parents=True)
    (where / "fleet.json").write_text(json.dumps(doc))
    return where


def _class_run(where: Path, run_id: str, members: list[str]) -> Path:
    """A run directory per class of the corpus, for the real run: `run_id` (the class's members
    together), the honest hosts' faults, and each member as the finding id of a host of its own
    (fid01, fid02, ...) and as the name of a failed host."""
    fids = {f"fid{j:02d}": m for j, m in enumerate(members, 1)}
    names = [*PLAN[:3], *fids, *members, *(f"ok{i:02d}" for i in range(20))]
    doc = {"schema_version": 1, "run": {"id": run_id}, "summary": {}, "classes": [],
           "hosts": [{"name": n, "outcome": "ok", "class": "8xH100"} for n in names],
           "findings": [_finding("node01", "gpu.lost", run_id),
                        _finding("node02", "gpu.row_remap.pending", f"GPU3 (0000:5d:00.0) {run_id}", GPU3),
                        _finding("node03", "nvlink.fabric.incomplete", run_id),
                        *(_finding(h, m, m) for h, m in fids.items()), *(_finding(m, "gpu.lost") for m in members)]}
    where.mkdir(parents=True)
    (where / "fleet.json").write_text(json.dumps(doc))
    return where


def _reason(run_id: str, rule: str) -> str:
    """The drain reason the playbook states (remediation.py: cut to 200 characters)."""
    text = f"fleetprobe {run_id}: {rule}"
    return text if len(text) <= 200 else text[:192] + " +more"


def _env(tmp: Path, path: str | None = None) -> dict[str, str]:
    return {**os.environ, "ANSIBLE_LOCAL_TEMP": str(tmp / "ansible-tmp"), "ANSIBLE_HOME": str(tmp / "ansible-home"),
            "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_HOST_KEY_CHECKING": "0",
            "ANSIBLE_RETRY_FILES_ENABLED": "0", "ANSIBLE_FORKS": "25", "ANSIBLE_PIPELINING": "1", "PATH": path or os.environ["PATH"]}


def _playbook(*args: str, tmp: Path, path: str | None = None) -> subprocess.CompletedProcess[str]:
    assert ANSIBLE_PLAYBOOK.is_file(), f"{ANSIBLE_PLAYBOOK} missing: install the test extra (ansible-core)"
    return subprocess.run([str(ANSIBLE_PLAYBOOK), *args], capture_output=True, text=True, timeout=600,
                          env=_env(tmp, path), cwd=tmp)


def _inventory(tmp: Path) -> Path:
    """The plan's hosts and many similarly named decoys, all reached locally, become off."""
    hosts = {n: None for n in [*PLAN, *DECOYS, *FIDS]}
    inv = tmp / "inventory.yml"
    inv.write_text(json.dumps({"all": {"hosts": hosts, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_become": False}}}))
    return inv


_STUB = """#!{python}
import json, sys
with open({log!r}, "a") as f:
    f.write(json.dumps([{name!r}, *sys.argv[1:]]) + "\\n")
if {name!r} == "systemctl" and sys.argv[1:2] == ["show"]:  # what ansible.builtin.systemd reads of a unit
    print("Id=" + sys.argv[2] + "\\nLoadState=loaded\\nActiveState=active\\nSubState=running\\nUnitFileState=enabled")
if {name!r} == "scontrol" and sys.argv[1:3] == ["show", "node"]:  # drained, no reason (not resumed)
    print("NodeName=" + sys.argv[3] + "\\n   State=IDLE+DRAIN ThreadsPerCore=1")
"""


def _stubs(tmp: Path) -> tuple[str, Path]:
    """scontrol, squeue, nvidia-smi, systemctl, probe as scripts that log their argv (JSON, one call
    a line); `scontrol show node` says the node is drained, `probe` (the check run again) passes."""
    bin_, log = tmp / "stub-bin", tmp / "argv.log"
    bin_.mkdir()
    for name in ("scontrol", "squeue", "nvidia-smi", "systemctl", "shutdown", "reboot", "probe"):
        (bin_ / name).write_text(_STUB.format(python=sys.executable, log=str(log), name=name))
        (bin_ / name).chmod(0o755)
    return f"{bin_}{os.pathsep}{os.environ['PATH']}", log


def _listed(stdout: str) -> dict[str, list[str]]:
    """`--list-hosts` output: play name's action part -> its hosts (several playbooks concatenated)."""
    out: dict[str, list[str]] = {}
    play = None
    for line in stdout.splitlines():  # a play name with a line break spans lines: its end is found
        m = re.search(r": (drain in Slurm|reset GPUs where idle|restart services|reboot|verify and resume in Slurm)"
                      r"\tTAGS: \[", line)
        if m:
            play = m.group(1)
        elif play and re.match(r" {6}\S", line):
            out.setdefault(play, []).append(line.strip())
    return out


@pytest.fixture(scope="module")
def playbooks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[tuple[str, Path]]]:
    """One stored run and its playbook per hostile string (guard forced: 4 of 20 hosts)."""
    tmp = tmp_path_factory.mktemp("inert")
    marker = tmp / "PWNED"
    books = []
    for i, raw in enumerate(ALL):
        hostile = armed(raw, marker)
        run = _stored_run(tmp / "runs" / f"r{i:02d}", hostile)
        plan = remedy.plan(load_result(run), force=True)
        books.append((hostile, write_playbook(plan, tmp / f"fix{i:02d}.yml")))
    return tmp, marker, books


@pytest.fixture(scope="module")
def class_playbooks(tmp_path_factory: pytest.TempPathFactory
                    ) -> Iterator[tuple[Path, Path, list[tuple[str, list[str], Path]]]]:
    """One stored run and its playbook per class of the corpus (fewer playbooks for the real run:
    each costs seconds of ansible-playbook); its run id the class's first member, so that every
    member fits whole in a drain reason beside it (the marker's path is short for that)."""
    tmp = tmp_path_factory.mktemp("inert-run")
    short = Path(tempfile.mkdtemp(prefix="fp45-"))
    marker = short / "M"
    books = []
    for cls, raw in CLASSES.items():
        members = [armed(m, marker) for m in raw]
        plan = remedy.plan(load_result(_class_run(tmp / "runs" / cls, members[0], members)), force=True)
        assert sorted(lo.host for lo in plan.left_out) == sorted(members)
        books.append((members[0], members, write_playbook(plan, tmp / f"{cls}.yml")))
    yield tmp, marker, books
    shutil.rmtree(short)


def test_every_hostile_string_is_refused_as_a_host_name() -> None:
    assert [s for s in ALL if name_problem(s) is None] == []
    assert [n for n in [*PLAN, *DECOYS] if name_problem(n) is not None] == []


def test_the_playbooks_hold_only_the_plan_and_the_strings_as_data(playbooks: tuple[Path, Path, list[Any]]) -> None:
    _tmp, _marker, books = playbooks
    for hostile, book in books:
        plays = ansible_yaml(book.read_text())
        assert {p["name"]: p["hosts"] for p in plays} == {f"fleetprobe {hostile}: {k}": v for k, v in PLAYS.items()}
        drain = plays[0]["vars"]["fleetprobe_drain_reason"]
        assert drain["node04"] == _reason(hostile, hostile)  # the finding id, verbatim
        # every string of the run is tagged; the hostile host is only named in the header
        assert re.findall(r"^- name: (\S+)", book.read_text(), re.M) == ["!unsafe"] * 5
        header = [ln for ln in book.read_text().splitlines() if ln.startswith("#")]
        assert sum("LEFT OUT, in no play: host " in ln for ln in header) == 1, header


def test_ansible_playbook_checks_and_lists_exactly_the_plan(playbooks: tuple[Path, Path, list[Any]]) -> None:
    tmp, marker, books = playbooks
    inv = _inventory(tmp)
    files = [str(b) for _h, b in books]
    check = _playbook("--syntax-check", "-i", str(inv), *files, tmp=tmp)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-3000:]
    assert not marker.exists()
    listed = _playbook("--list-hosts", "-i", str(inv), *files, tmp=tmp)
    assert listed.returncode == 0, listed.stdout[-3000:] + listed.stderr[-3000:]
    assert not marker.exists()
    for hostile, _b in books:  # each play name printed as written: nothing templated in it
        if not any(c in hostile for c in "\n\r\u2028\u0085\u2029\t"):
            assert f"fleetprobe {hostile}: drain in Slurm" in listed.stdout, hostile
    seen = _listed(listed.stdout)
    assert {play: len(hosts) for play, hosts in seen.items()} == {p: len(h) * len(books) for p, h in PLAYS.items()}
    for play, hosts in PLAYS.items():
        assert set(seen[play]) == set(hosts), (play, set(seen[play]) - set(hosts))


def test_a_real_run_against_stub_commands_executes_nothing_of_the_run(
        class_playbooks: tuple[Path, Path, list[tuple[str, list[str], Path]]]) -> None:
    tmp, marker, books = class_playbooks
    path, log = _stubs(tmp)
    run = _playbook("-i", str(_inventory(tmp)), "--skip-tags", "reboot", *[str(b) for _r, _m, b in books], tmp=tmp,
                    path=path)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-3000:]
    assert not marker.exists()
    calls = [tuple(json.loads(ln)) for ln in log.read_text().splitlines()]
    expected: list[tuple[str, ...]] = []
    for run_id, members, _b in books:
        rules = {"node01": "gpu.lost", "node02": "gpu.row_remap.pending", "node03": "nvlink.fabric.incomplete",
                 **{f"fid{j:02d}": m for j, m in enumerate(members, 1)}}
        expected += [("scontrol", "update", f"NodeName={h}", "State=DRAIN", f"Reason={_reason(run_id, r)}")
                     for h, r in rules.items()]
        expected += [("nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader", "--id=0000:5d:00.0"),
                     ("nvidia-smi", "-r", "--id=0000:5d:00.0"), ("systemctl", "restart", "nvidia-fabricmanager")]
    # the module's own `show`; the playbook's reads of Slurm (the reason, the wait for DRAINED, the
    # queue) and its check run again on each host acted on, which name only the plan's hosts
    reads = [c for c in calls if c[:3] == ("scontrol", "show", "node") or c[0] in ("squeue", "probe")]
    ours = [c for c in calls if not (c[0] == "systemctl" and c[1] != "restart") and c not in reads]
    assert sorted(ours) == sorted(expected)
    assert sorted(c[-1] for c in reads if c[0] == "probe") == sorted(["node01", "node02", "node03"] * len(books))
    assert {c[:4] for c in reads if c[0] == "probe"} == {("probe", "run", "-q", "-l")}
    drained = {c[2].removeprefix("NodeName=") for c in expected if c[0] == "scontrol"}
    assert {c[3] for c in reads if c[0] == "scontrol"} == drained == {c[3] for c in reads if c[0] == "squeue"}
    # every member reaches scontrol verbatim, as one argument: no reason was cut
    reasons = {c[-1] for c in calls if c[0] == "scontrol"}
    assert all(f"Reason=fleetprobe {r}: {m}" in reasons for r, ms, _b in books for m in ms)
    assert not [c for c in calls if c[0] in ("shutdown", "reboot")]


def test_probe_remediate_names_each_refused_host_and_the_guard_does_not_count_it(tmp_path: Path) -> None:
    """Before issue 45 the hostile names were counted (5 of 20 > 2 allowed: refused) and written."""
    marker = tmp_path / "PWNED"
    for cls, members in CLASSES.items():
        names = [armed(m, marker) for m in members]
        doc = {"schema_version": 1, "run": {"id": "r1"}, "summary": {}, "classes": [],
               "hosts": [{"name": n, "outcome": "ok", "class": "8xH100"} for n in ["node01", *names]]
               + [{"name": f"ok{i:02d}", "outcome": "ok", "class": "8xH100"} for i in range(20)],
               "findings": [_finding(n, "gpu.lost") for n in ["node01", *names]]}
        run = tmp_path / cls
        run.mkdir()
        (run / "fleet.json").write_text(json.dumps(doc))
        out = tmp_path / f"{cls}.yml"
        res = run_cli(["remediate", str(run), "-o", str(out)], env=cli_env(XDG_STATE_HOME=str(tmp_path / "state")))
        assert res.code == 0, (cls, res.stderr)
        warned = [ln for ln in res.stderr.splitlines() if " left out of " in ln]
        assert len(warned) == len(names), (cls, res.stderr)
        assert all(ln.startswith("probe: warning: ") and "act on it by hand" in ln for ln in warned)
        plays = ansible_yaml(out.read_text())
        assert {p["name"]: p["hosts"] for p in plays} == {"fleetprobe r1: drain in Slurm": ["node01"],
                                                          "fleetprobe r1: reboot": ["node01"],
                                                          "fleetprobe r1: verify and resume in Slurm": ["node01"]}
        fleet = load_result(run)
        decision = remedy.drain_plan(fleet)
        assert not decision.blocked and [h.host for h in decision.hosts] == ["node01"]
        assert sorted(lo.host for lo in decision.left_out) == sorted(names)
        assert not remedy.plan(fleet, min_severity=Severity.FAIL).blocked
    assert not marker.exists()


def test_the_drain_lines_under_sh_run_only_scontrol_once_per_named_node(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    path, log = _stubs(tmp_path)
    hostile = [armed(s, marker) for s in ALL]
    doc = {"schema_version": 1, "run": {"id": " ".join(hostile)}, "summary": {}, "classes": [],
           "hosts": [{"name": n, "outcome": "ok"} for n in ["node01", "node02", *hostile]],
           "findings": [_finding("node01", "gpu.lost"), *(_finding("node02", h) for h in hostile),
                        *(_finding(h, "gpu.lost") for h in hostile)]}
    fleet = FleetResult.from_document(doc)
    text = render_drain(fleet, remedy.drain_plan(fleet, force=True))
    script = tmp_path / "drain.sh"
    script.write_text(text)
    proc = subprocess.run(["sh", str(script)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": path}, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert not marker.exists()
    calls = [json.loads(ln) for ln in log.read_text().splitlines()]
    updates = [c for c in calls if c[:2] == ["scontrol", "update"]]
    assert sorted(c[2] for c in updates) == ["NodeName=node01", "NodeName=node02"]
    assert all(c[3] == "State=DRAIN" and len(c) == 5 for c in updates)
    # the guard read each node's reason first (issue 47), and nothing else ran
    assert sorted(c for c in calls if c not in updates) == [["scontrol", "show", "node", "node01"],
                                                            ["scontrol", "show", "node", "node02"]]
    lines = text.splitlines()
    assert sum(ln.startswith("# not a Slurm node name, left out: ") for ln in lines) == len(hostile)
    assert [shlex.split(ln)[3] for ln in lines if ln.startswith("unless_foreign_reason scontrol ")] == [
        "NodeName=node01", "NodeName=node02"]


def test_the_inventory_holds_no_refused_name_and_no_value_ansible_templates(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    hostile = [armed(s, marker) for s in ALL]
    doc = {"schema_version": 1, "run": {"id": "r1"}, "summary": {}, "classes": [],
           "hosts": [{"name": n, "outcome": "ok", "class": "8xH100"} for n in ["node01", *hostile]],
           "findings": [*(_finding("node01", h, h) for h in hostile), *(_finding(h, "gpu.lost") for h in hostile)]}
    inv = write_inventory(FleetResult.from_document(doc), tmp_path / "inv.yml")
    text = inv.read_text()
    assert sum(ln.startswith("# not an Ansible host name, left out: ") for ln in text.splitlines()) == len(hostile)
    listed = ansible_list(inv)
    assert sorted(listed["_meta"]["hostvars"]) == ["node01"]
    # a play reading the host's variables templates them: the finding ids stay what they are
    play = tmp_path / "read.yml"
    play.write_text("- hosts: node01\n  gather_facts: false\n  tasks:\n"
                    "  - ansible.builtin.copy: {content: '{{ fleetprobe_findings | to_json }}', dest: "
                    + json.dumps(str(tmp_path / "seen.json")) + "}\n")
    run = _playbook("-i", str(inv), "-e", json.dumps({"ansible_connection": "local",
                                                       "ansible_python_interpreter": sys.executable}),
                    str(play), tmp=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert not marker.exists()
    assert sorted(json.loads((tmp_path / "seen.json").read_text())) == sorted(set(hostile))


def test_a_name_that_is_also_a_group_of_the_operator_runs_nothing_on_the_group(tmp_path: Path) -> None:
    """`compute` is a valid host name, and a group of the operator's inventory: the play lists the
    group's hosts, and its first task ends each of them (not the host it was written for)."""
    doc = {"schema_version": 1, "run": {"id": "r1"}, "summary": {}, "classes": [],
           "hosts": [{"name": n, "outcome": "ok"} for n in ["node01", "compute", *(f"ok{i:02d}" for i in range(20))]],
           "findings": [_finding("node01", "gpu.lost"), _finding("compute", "gpu.lost")]}
    run = tmp_path / "run"
    run.mkdir()
    (run / "fleet.json").write_text(json.dumps(doc))
    book = write_playbook(remedy.plan(load_result(run)), tmp_path / "fix.yml")
    members = {f"node1{i}": None for i in range(10)}
    inv = tmp_path / "inventory.yml"
    inv.write_text(json.dumps({"all": {
        "hosts": {"node01": None}, "children": {"compute": {"hosts": members}},
        "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "ansible_become": False}}}))
    path, log = _stubs(tmp_path)
    ran = _playbook("-i", str(inv), "--skip-tags", "reboot", str(book), tmp=tmp_path, path=path)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
    calls = [json.loads(ln) for ln in log.read_text().splitlines()]
    assert [c[2] for c in calls if c[:2] == ["scontrol", "update"]] == ["NodeName=node01"]
    # the reads of Slurm and the check run again name node01 alone too
    assert {c[3] if c[0] != "probe" else c[-1] for c in calls if c[0] != "scontrol" or c[1] == "show"} == {"node01"}
    listed = _playbook("--list-hosts", "-i", str(inv), str(book), tmp=tmp_path)
    assert set(_listed(listed.stdout)["drain in Slurm"]) == {"node01", *members}  # what the guard task is for


def test_node_names_from_imported_bundle_documents_are_left_out_and_said(tmp_path: Path) -> None:
    """The road of the report: `probe import` of srun output whose documents name themselves
    (SLURMD_NODENAME) with the corpus, then `--slurm-drain` and `probe remediate`."""
    marker = tmp_path / "PWNED"
    env = cli_env(XDG_STATE_HOME=str(tmp_path / "state"))
    bundle = tmp_path / "b.py"
    made = run_cli(["bundle", "--probe", "host", "--expect", "gpu_count=3", "-o", str(bundle)], env=env)
    assert made.code == 0, made.stderr
    out = tmp_path / "out"
    out.mkdir()
    names = ["node01", *(armed(m, marker) for m in ALL)]
    for i, name in enumerate(names):
        run_script(bundle, out / f"{i}.json", env={"SLURMD_NODENAME": name, "SLURM_JOB_ID": "42",
                                                    "SLURM_PROCID": str(i), "SLURM_STEP_ID": "0"})
    drain = tmp_path / "drain.sh"
    imp = run_cli(["import", str(out), "--results", str(tmp_path / "runs"), "-q", "--force", "--slurm-drain", str(drain)],
                  env=env, timeout=180)
    assert imp.code in (0, 1), imp.stderr[-3000:]
    assert len([ln for ln in imp.stderr.splitlines() if ln.startswith(f"probe: warning: --slurm-drain {drain}: ")
                and " left out: " in ln]) == len(ALL), imp.stderr[-3000:]
    lines = drain.read_text().splitlines()
    guard = DRAIN_GUARD.splitlines()  # the shell function each line goes through (issue 47)
    assert [ln.split()[3] for ln in lines if not ln.startswith("#") and ln not in guard] == ["NodeName=node01"]
    fix = tmp_path / "fix.yml"
    rem = run_cli(["remediate", "--results", str(tmp_path / "runs"), "-o", str(fix)], env=env)
    assert rem.code == 0, rem.stderr[-3000:]
    assert len([ln for ln in rem.stderr.splitlines() if f" left out of {fix}: " in ln]) == len(ALL), rem.stderr
    assert all(p["hosts"] in ([], ["node01"]) for p in ansible_yaml(fix.read_text()))
    assert not marker.exists()


def test_a_finding_id_of_a_merged_shard_reaches_the_playbook_as_data(tmp_path: Path) -> None:
    """The stored-run road of the report: one shard's findings carry a hostile id (one member of
    every class in one string), `probe merge` keeps it, `probe remediate` writes it, and the real
    ansible-playbook checks and runs the playbook: scontrol gets it verbatim, nothing runs."""
    short = Path(tempfile.mkdtemp(prefix="fp45-"))  # the whole id fits in the 200 characters of a reason
    marker = short / "M"
    hostile = " ".join(armed(members[0], marker) for members in CLASSES.values())
    env = cli_env(XDG_STATE_HOME=str(tmp_path / "state"))
    bundle = tmp_path / "b.py"
    assert run_cli(["bundle", "--probe", "host", "--expect", "gpu_count=3", "-o", str(bundle)], env=env).code == 0
    shards = []
    for k in (1, 2):
        out = tmp_path / f"out{k}"
        out.mkdir()
        for i in range(2):
            run_script(bundle, out / f"{i}.json", env={"SLURMD_NODENAME": f"node{k}{i}", "SLURM_JOB_ID": str(k),
                                                        "SLURM_PROCID": str(i), "SLURM_STEP_ID": "0"})
        imp = run_cli(["import", str(out), "--results", str(tmp_path / f"runs{k}"), "-q"], env=env)
        assert imp.code in (0, 1), imp.stderr[-2000:]
        [shard] = [p for p in (tmp_path / f"runs{k}").iterdir() if p.is_dir()]
        shards.append(shard)
    faults = json.loads((shards[0] / "findings.json").read_text())
    [fid] = {f["id"] for f in faults if f["severity"] == "fail"}
    # the shard as a tampered copy would have it: the fault's id replaced, and the action stored with
    # it one that takes the node out (what an id this fleetprobe does not know asks for)
    def tampered(f: dict[str, Any]) -> dict[str, Any]:
        return {**f, "id": hostile, "action": "reseat_inspect"} if f["id"] == fid else f

    doc = read_plain(shards[0] / "fleet.json")
    doc["findings"] = [tampered(f) for f in doc["findings"]]
    write_fleet(shards[0] / "fleet.json", doc)
    (shards[0] / "findings.json").write_text(json.dumps([tampered(f) for f in faults]))
    merged = run_cli(["merge", *map(str, shards), "--results", str(tmp_path / "merged"), "-q"], env=env)
    assert merged.code in (0, 1), merged.stderr[-2000:]
    fix = tmp_path / "fix.yml"
    rem = run_cli(["remediate", "--results", str(tmp_path / "merged"), "-o", str(fix), "--force"], env=env)
    assert rem.code == 0, rem.stderr[-2000:]
    assert hostile in ansible_yaml(fix.read_text())[0]["vars"]["fleetprobe_drain_reason"]["node10"]
    inv = tmp_path / "inventory.yml"
    inv.write_text(json.dumps({"all": {"hosts": dict.fromkeys(["node10", "node11", "node20", "node21", *DECOYS]),
                                       "vars": {"ansible_connection": "local", "ansible_become": False,
                                                "ansible_python_interpreter": sys.executable}}}))
    check = _playbook("--syntax-check", "-i", str(inv), str(fix), tmp=tmp_path)
    assert check.returncode == 0, check.stdout[-2000:] + check.stderr[-2000:]
    path, log = _stubs(tmp_path)
    ran = _playbook("-i", str(inv), "--skip-tags", "reboot", str(fix), tmp=tmp_path, path=path)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
    assert not marker.exists()
    calls = [json.loads(ln) for ln in log.read_text().splitlines()]
    drained = {c[2]: c[4] for c in calls if c[:2] == ["scontrol", "update"]}
    assert sorted(drained) == ["NodeName=node10", "NodeName=node11"]
    assert all(reason.endswith(f": {hostile}") for reason in drained.values())
    shutil.rmtree(short)
