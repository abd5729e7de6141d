"""A host speaks only for itself (issue 45): a bundle document that claims another host's name is
that document's own finding, never a verdict on, nor a replacement for, the host it names.

Through the real `probe import` and `probe remediate`.  The innocent node05 answers as the healthy
demo machine dgx-h100-01; every hostile claimant answers as dgx-h100-05, whose GPU missing from NVML
is a fail fault the drain list and the playbook act on (on main, the claimant read first kept the
name node05, and node05 was drained and rebooted for it).  Files are placed as `srun -o
out/%N.json` places them (the place is the controller's word), or as `-o out/%j.%t.json` (no name)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.collected import recorded_document
from tests.support.fleet import Cli

HEALTHY, FAULTY = "dgx-h100-01", "dgx-h100-05"  # demo recordings: no finding / gpu.count.pci_vs_nvml (fail)
VICTIM = "node05"
# the innocent bystanders' machines: healthy, each with GPUs of its own (one machine twice is a duplicate UUID)
BYSTANDERS = {"node01": "dgx-h100-02", "node02": "dgx-a100-01"}


def _claim(field: str, name: str, task: int = 1) -> tuple[dict[str, str], str | None]:
    """The identity (and for_host) of a document claiming `name` through `field` (as rank `task`)."""
    if field == "for_host":
        return {"hostname": "evil03"}, name
    if field == "hostname":
        return {"hostname": name}, None
    return {"hostname": "evil03", "node_name": name, "job_id": "42", "task_id": str(task), "scheduler": "slurm"}, None


# how a hostile document claims node05: the scheduler's node name, the bundle's own host, the hostname,
# and all of them forged alike (the hostname agreeing with the node name proves nothing)
CLAIMS = ["node_name", "for_host", "hostname", "node_name+hostname"]


def _hostile(field: str, task: int = 1) -> dict[str, Any]:
    if field == "node_name+hostname":
        ident, _ = _claim("node_name", VICTIM, task)
        return recorded_document({**ident, "hostname": VICTIM}, FAULTY)
    ident, for_host = _claim(field, VICTIM, task)
    return recorded_document(ident, FAULTY, for_host)


def _real(name: str = VICTIM, task: int = 0) -> dict[str, Any]:
    return recorded_document({"hostname": name, "node_name": name, "job_id": "42", "task_id": str(task),
                              "scheduler": "slurm"}, BYSTANDERS.get(name, HEALTHY))


def _write(directory: Path, docs: dict[str, dict[str, Any]]) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    for name, doc in docs.items():
        (directory / name).write_text(json.dumps(doc))
    return [directory / name for name in docs]


def _import(cli: Cli, tmp: Path, files: list[Path]) -> tuple[int, dict[str, Any], str, str]:
    """`probe import FILES --slurm-drain drain.sh` then `probe remediate -o fix.yml`: (exit, fleet.json,
    the drain list, the playbook and what remediate said)."""
    drain = tmp / "drain.sh"
    proc = cli.run("import", *map(str, files), "--results", str(cli.results), "--format", "json",
                   "--slurm-drain", str(drain))
    assert proc.returncode not in (2, 70), proc.stderr
    fleet = json.loads(proc.stdout)
    fix = tmp / "fix.yml"
    rem = cli.run("remediate", "--results", str(cli.results), "-o", str(fix), "--severity", "warn")
    assert rem.returncode == 0, rem.stderr
    playbook = (fix.read_text() if fix.exists() else "") + rem.stdout
    return proc.returncode, fleet, drain.read_text() if drain.exists() else "", playbook


def _hosts(fleet: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {h["name"]: h for h in fleet["hosts"]}


def _findings_of(fleet: dict[str, Any], host: str) -> list[dict[str, Any]]:
    return [f for f in fleet["findings"] if f["host"] == host]


def _assert_claimant(fleet: dict[str, Any], name: str) -> None:
    """Not judged: its one finding is its own claim, its health incomplete (nothing acted on)."""
    assert name != VICTIM and name.startswith(VICTIM + "#"), name
    host = _hosts(fleet)[name]
    assert host["health"]["state"] == "incomplete", host["health"]
    assert [f["id"] for f in _findings_of(fleet, name)] == ["identity.name.claimed"], _findings_of(fleet, name)
    assert "None" not in _findings_of(fleet, name)[0]["message"]


def _assert_nobody_acts_on_the_victim(drain: str, playbook: str) -> None:
    assert "scontrol" not in "".join(line for line in drain.splitlines() if not line.startswith("#")), drain
    assert VICTIM not in drain, drain
    assert VICTIM not in playbook, playbook


@pytest.mark.parametrize("hostile_first", [True, False], ids=["hostile-first", "hostile-second"])
@pytest.mark.parametrize("field", CLAIMS)
def test_a_document_claiming_a_placed_name_is_its_own_finding(tmp_path: Path, field: str, hostile_first: bool
                                                              ) -> None:
    """srun -o out/%N.json: the real node05's file is out/node05.json, the claimant's its own
    node's.  Either order of reading (the directory's, and files named in either order)."""
    docs = {"node01.json": _real("node01"), "node02.json": _real("node02"), "node05.json": _real(),
            "evil03.json": _hostile(field)}
    files = _write(tmp_path / "out", docs)
    order = [files[3], files[2]] if hostile_first else [files[2], files[3]]
    for given, where in (([tmp_path / "out"], "dir"), ([files[0], files[1], *order], "files")):
        cli = Cli.create(tmp_path / where)
        code, fleet, drain, playbook = _import(cli, tmp_path / where, given)
        hosts = _hosts(fleet)
        assert hosts[VICTIM]["health"]["state"] == "healthy", hosts[VICTIM]
        assert _findings_of(fleet, VICTIM) == [] or all(
            f["severity"] != "fail" for f in _findings_of(fleet, VICTIM)), _findings_of(fleet, VICTIM)
        (claimant,) = [n for n in hosts if n.startswith(VICTIM + "#")]
        _assert_claimant(fleet, claimant)
        assert "evil03.json" in _findings_of(fleet, claimant)[0]["message"] or \
            "node05.json" in _findings_of(fleet, claimant)[0]["message"]
        _assert_nobody_acts_on_the_victim(drain, playbook)
        assert code == 4, code  # a host not judged: hosts failed, no fail finding


def test_three_claimants_of_one_placed_name(tmp_path: Path) -> None:
    docs = {"aa-evil.json": _hostile("node_name"), "node05.json": _real(), "node01.json": _real("node01"),
            "zz-evil.json": _hostile("for_host"), "mm-evil.json": _hostile("hostname")}
    cli = Cli.create(tmp_path)
    code, fleet, drain, playbook = _import(cli, tmp_path, [_write(tmp_path / "out", docs)[0].parent])
    assert code == 4
    hosts = _hosts(fleet)
    assert hosts[VICTIM]["health"]["state"] == "healthy"
    claimants = sorted(n for n in hosts if n.startswith(VICTIM + "#"))
    assert claimants == [f"{VICTIM}#2", f"{VICTIM}#3", f"{VICTIM}#4"]
    for name in claimants:
        _assert_claimant(fleet, name)
    _assert_nobody_acts_on_the_victim(drain, playbook)


@pytest.mark.parametrize("hostile_task", [0, 1, 2])
@pytest.mark.parametrize("field", ["node_name", "hostname", "node_name+hostname"])
def test_an_undecidable_name_is_acted_on_for_nobody(tmp_path: Path, field: str, hostile_task: int) -> None:
    """srun -o out/%j.%t.json: no file's place names a node, and the claimant says the rank its file
    is placed at.  A hostname (the host's own word) that agrees proves nothing: neither document is
    judged as node05, no drain line nor playbook targets it, and both carry the finding."""
    tasks = [t for t in range(3) if t != hostile_task]
    docs = {f"42.{hostile_task}.json": _hostile(field, hostile_task), f"42.{tasks[0]}.json": _real(task=tasks[0]),
            f"42.{tasks[1]}.json": _real("node01", tasks[1])}
    cli = Cli.create(tmp_path)
    code, fleet, drain, playbook = _import(cli, tmp_path, [_write(tmp_path / "out", docs)[0].parent])
    hosts = _hosts(fleet)
    assert VICTIM not in hosts
    claimants = sorted(n for n in hosts if n.startswith(VICTIM + "#"))
    assert claimants == [f"{VICTIM}#1", f"{VICTIM}#2"]
    for name in claimants:
        _assert_claimant(fleet, name)
        assert "2 documents claim 'node05'" in _findings_of(fleet, name)[0]["message"]
    assert hosts["node01"]["health"]["state"] == "healthy"
    _assert_nobody_acts_on_the_victim(drain, playbook)
    assert code == 4


@pytest.mark.parametrize("forged", [("42", "0"), ("42", "2"), ("41", "1"), ("", "0")],
                         ids=["the-victims-rank", "a-free-rank", "another-job", "no-job"])
@pytest.mark.parametrize("hostile_first", [True, False], ids=["hostile-first", "hostile-second"])
def test_a_document_claiming_another_ranks_slot_is_its_own_finding(tmp_path: Path, forged: tuple[str, str],
                                                                   hostile_first: bool) -> None:
    """srun -o out/%j.%t.json: the claimant's output is placed as rank 1 of job 42, and it says it
    is node05 as another rank (or job): its place proves it false, and the real node05 (rank 0 by
    its place and its word) keeps its name.  Without a job id it claims no slot, and the name is
    contested instead."""
    job, task = forged
    ident, _ = _claim("node_name", VICTIM)
    ident = {**ident, "job_id": job, "task_id": task} if job else {"hostname": "evil03", "node_name": VICTIM}
    hostile = "42.1.json"
    real = "42.0.json" if hostile_first else "42.2.json"  # read after the claimant, or before
    docs = {hostile: recorded_document(ident, FAULTY), real: _real(task=int(real.split(".")[1])),
            "42.3.json": _real("node01", 3)}
    cli = Cli.create(tmp_path)
    _code, fleet, drain, playbook = _import(cli, tmp_path, [_write(tmp_path / "out", docs)[0].parent])
    hosts = _hosts(fleet)
    if job:
        assert hosts[VICTIM]["health"]["state"] == "healthy", hosts[VICTIM]
        (claimant,) = [n for n in hosts if n.startswith(VICTIM + "#")]
        _assert_claimant(fleet, claimant)
        assert "another rank's slot" in _findings_of(fleet, claimant)[0]["message"]
    else:
        assert VICTIM not in hosts and len([n for n in hosts if n.startswith(VICTIM + "#")]) == 2
    _assert_nobody_acts_on_the_victim(drain, playbook)


@pytest.mark.parametrize("field", CLAIMS)
def test_a_claim_its_own_file_place_disproves(tmp_path: Path, field: str) -> None:
    """The real node05 sent nothing; the claimant's file is placed under its own node, node07, which
    the inventory names: its place proves the claim false, so node05 is judged by nobody."""
    inv = tmp_path / "inv.yml"
    inv.write_text("all:\n  hosts:\n" + "".join(f"    {n}:\n      ansible_host: 10.0.0.{i}\n"
                                               for i, n in enumerate(("node01", "node05", "node07"), 1)))
    docs = {"node01.json": _real("node01"), "node07.json": _hostile(field)}
    files = _write(tmp_path / "out", docs)
    cli = Cli.create(tmp_path)
    drain = tmp_path / "drain.sh"
    proc = cli.run("import", str(files[0].parent), "-i", str(inv), "--results", str(cli.results), "--format",
                   "json", "--slurm-drain", str(drain))
    assert proc.returncode == 4, proc.stderr
    fleet = json.loads(proc.stdout)
    hosts = _hosts(fleet)
    assert VICTIM not in hosts
    (claimant,) = [n for n in hosts if n.startswith(VICTIM + "#")]
    _assert_claimant(fleet, claimant)
    assert "its file's place names 'node07'" in _findings_of(fleet, claimant)[0]["message"]
    assert VICTIM not in drain.read_text()


# ------------------------------------------------------------------------ the ansible-runner road


def _event(counter: int, host: str, probe: str, envelope: dict[str, Any], more: dict[str, Any]) -> dict[str, Any]:
    return {"counter": counter, "event": "runner_on_ok", "event_data": {
        "host": host, "task_action": f"fleetprobe.gpu.{probe}",
        "res": {"envelope": envelope, "fleetprobe_answer": {
            "probe": probe, "exit": 0, "timed_out": False, "out_trunc": False, "err_trunc": False,
            "duration_s": 0.2, "stderr": ""}, **more}}}


# what an answer's payload may say to speak for node05: the host probe's hostname, a host key and an
# inventory name of its own in the result, Ansible's delegation record
PAYLOAD_CLAIMS: dict[str, dict[str, Any]] = {
    "hostname": {},
    "host-key": {"host": VICTIM, "inventory_hostname": VICTIM},
    "delegated": {"_ansible_delegated_vars": {"ansible_host": VICTIM, "inventory_hostname": VICTIM}},
}


@pytest.mark.parametrize("claim", sorted(PAYLOAD_CLAIMS))
@pytest.mark.parametrize("hostile_first", [True, False], ids=["hostile-first", "hostile-second"])
def test_an_ansible_answer_is_the_event_hosts_whatever_its_payload_claims(tmp_path: Path, claim: str,
                                                                          hostile_first: bool) -> None:
    """Ansible (the controller) names the host of each event: node03's answers that say they are
    node05's are node03's, and node05 is judged on its own answers only."""
    from tests.support.collected import RECORDINGS

    def envelopes(machine: str) -> dict[str, dict[str, Any]]:
        return {p: json.loads((RECORDINGS / machine / f"{p}.json").read_text()) for p in ("host", "nvml", "pcie")}

    hostile = envelopes(FAULTY)
    hostile["host"]["data"]["hostname"] = VICTIM
    sides = [("node03", hostile, PAYLOAD_CLAIMS[claim]), (VICTIM, envelopes(HEALTHY), {})]
    events = tmp_path / "artifacts" / "job_events"
    events.mkdir(parents=True)
    counter = 0
    for host, answers, more in (sides if hostile_first else sides[::-1]):
        for probe, envelope in answers.items():
            counter += 1
            (events / f"{counter}-e{counter}.json").write_text(json.dumps(_event(counter, host, probe, envelope,
                                                                                  more)))
    cli = Cli.create(tmp_path)
    drain = tmp_path / "drain.sh"
    proc = cli.run("import", "--ansible-runner", str(tmp_path / "artifacts"), "--results", str(cli.results),
                   "--format", "json", "--slurm-drain", str(drain))
    assert proc.returncode in (1, 5), proc.stderr
    fleet = json.loads(proc.stdout)
    assert sorted(_hosts(fleet)) == ["node03", VICTIM]
    assert any(f["severity"] == "fail" for f in _findings_of(fleet, "node03"))
    assert not any(f["severity"] == "fail" for f in _findings_of(fleet, VICTIM)), _findings_of(fleet, VICTIM)
    lines = [line for line in drain.read_text().splitlines() if line.startswith("unless_foreign_reason scontrol")]
    assert len(lines) == 1 and "NodeName=node03 " in lines[0], drain.read_text()


# ------------------------------------------------------------------------------- the shards road


@pytest.mark.parametrize("hostile_first", [True, False], ids=["hostile-first", "hostile-second"])
def test_two_shards_claiming_one_host_refuse_the_merge(tmp_path: Path, hostile_first: bool) -> None:
    """A part whose node05 is a hostile document's and a part with the real node05: which is node05
    cannot be told from stored runs, so the merge is refused, naming both parts; no run, no drain list."""
    cli = Cli.create(tmp_path)
    parts = []
    for part, docs in (("real", {"node05.json": _real(), "node01.json": _real("node01")}),
                       ("hostile", {"node05.json": _hostile("node_name"), "node02.json": _real("node02")})):
        files = _write(tmp_path / part, docs)
        proc = cli.run("import", str(files[0].parent), "--results", str(cli.results), "--format", "json")
        assert proc.returncode in (0, 1), proc.stderr
        parts.append(cli.results / Path(json.loads(proc.stdout)["run"]["id"]).name)
    before = sorted(p.name for p in cli.results.iterdir())
    drain = tmp_path / "drain.sh"
    order = parts[::-1] if hostile_first else parts
    proc = cli.run("merge", *map(str, order), "--results", str(cli.results), "--slurm-drain", str(drain))
    assert proc.returncode == 2, proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("probe: error:")]
    assert f"host {VICTIM!r} is in both {order[0].name} and {order[1].name}" in line, line
    assert sorted(p.name for p in cli.results.iterdir()) == before and not drain.exists()


def test_a_flood_of_claimants_is_twenty_lines_and_a_count(tmp_path: Path) -> None:
    """45 documents claim node05 and no place decides: each is its own finding, the warnings name the
    first 20 and count the rest, and nothing acts on node05."""
    docs = {f"42.{t}.json": _hostile("node_name", t) for t in range(45)}
    cli = Cli.create(tmp_path)
    drain = tmp_path / "drain.sh"
    proc = cli.run("import", str(_write(tmp_path / "out", docs)[0].parent), "--results", str(cli.results),
                   "--format", "json", "--slurm-drain", str(drain))
    assert proc.returncode == 4, proc.stderr
    fleet = json.loads(proc.stdout)
    assert sorted(_hosts(fleet)) == sorted(f"{VICTIM}#{k}" for k in range(1, 46))
    assert all([f["id"] for f in _findings_of(fleet, h)] == ["identity.name.claimed"] for h in _hosts(fleet))
    said = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning: ") and ln.endswith(", not judged")]
    assert len(said) == 20, proc.stderr
    assert "warning: 25 more document(s) claim a name they cannot be shown to own" in proc.stderr
    assert "45 documents claim 'node05' ('42.0.json', '42.1.json', '42.10.json' and 42 more)" in said[0]
    assert VICTIM not in drain.read_text()
