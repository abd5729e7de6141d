"""`probe merge` streams: each stored record is decoded once, one at a time, and copied into the
merged fleet.json as its stored text, which is then the very file one run over the whole fleet
writes.

The fleet: every recorded demo machine twice (the copy replays the same recording under another
name, so identities repeat across shards: the fleet-wide steps have work to do), in three shards.
The whole run is judged in worker processes (the spool road), the shards in-process (records in
memory): the merged file must be byte for byte the whole run's either way.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import weakref
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api.merge import merge_runs
from orchestrator.simulate.record import demo_hosts
from orchestrator.store import members, spool
from orchestrator.store.compact import read_plain
from orchestrator.verdict.parallel import WORKERS_ENV
from tests.support.fleet import Cli, replay_inventory
from tests.support.schema2 import write_fleet as write_schema_2

SHARDS = 3


def _names() -> list[str]:
    names = list(demo_hosts())
    return names + [f"{n}-copy" for n in names]


def _inventory(names: list[str]) -> str:
    text = replay_inventory(names)
    for n in names:  # the copy replays its original's recording
        if n.endswith("-copy"):
            text = text.replace(f"probe_replay: {json.dumps(n)}", f"probe_replay: {json.dumps(n[:-len('-copy')])}")
    return text


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("merge-stream")
    inv = tmp / "inv.yml"
    inv.write_text(_inventory(_names()))
    cli = Cli.create(tmp)
    _probe(cli, 2, "run", "-i", str(inv), "-o", str(tmp / "whole"))
    parts = [tmp / f"s{k}" for k in range(1, SHARDS + 1)]
    for k, part in enumerate(parts, start=1):
        _probe(cli, 1, "run", "-i", str(inv), "--shard", f"{k}/{SHARDS}", "-o", str(part))
    return {"tmp": tmp, "cli": cli, "whole": tmp / "whole", "parts": parts}


def _probe(cli: Cli, workers: int, *args: str) -> None:
    """`probe ...` with this many judging (or, for a merge, decoding) processes."""
    proc = subprocess.run(cli.argv(*args, "-q"), env={**cli.env(), WORKERS_ENV: str(workers)}, cwd=str(cli.home),
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode in (0, 1, 5), proc.stderr


def _pieces(run: Path) -> tuple[bytes, bytes, dict[str, Any]]:
    """fleet.json as (its text before the host records with the run header emptied, the host
    records' text, the rest parsed with the repeat offenders' not-judged reasons left out): the
    header says how the run was made (a merge says it is one) and a merge reads no run history
    (`probe run` judges repeat offenders over its results directory's earlier runs)."""
    stored = (run / "fleet.json").read_bytes()
    index = json.loads((run / "fleet.index.json").read_text())["hosts"]
    start, end = index[0][1], index[-1][1] + index[-1][2]
    # schema 3 (store/members.py): the head's and the records' gzip members, decompressed
    head = members.unpack(stored[:start]).decode("utf-8")
    key = '"run":'
    at = head.index(key) + len(key)  # the document's second key, after schema_version
    _, stop = json.JSONDecoder().raw_decode(head, at)
    rest = read_plain(run / "fleet.json")
    rest.pop("hosts")
    rest.pop("run")
    rest["not_judged"].pop("host.repeat_offender")
    return (head[:at] + head[stop:]).encode("utf-8"), members.unpack(stored[start:end]), rest


@pytest.mark.parametrize("workers", [1, 2])
def test_the_merged_fleet_json_is_the_whole_runs_byte_for_byte(fleet: dict[str, Any], workers: int) -> None:
    merged = fleet["tmp"] / f"merged-{workers}"
    _probe(fleet["cli"], workers, "merge", *map(str, fleet["parts"]), "--results", str(merged), "--force")
    (run,) = [d for d in merged.iterdir() if (d / "fleet.json").is_file()]
    head, hosts, rest = _pieces(run)
    want_head, want_hosts, want_rest = _pieces(fleet["whole"])
    assert len(json.loads(b"[" + hosts + b"]")) == len(_names())
    assert hosts == want_hosts  # every record, byte for byte
    assert head == want_head  # the summary
    assert rest == want_rest  # classes, findings, silenced, not-judged ids
    assert not [p for p in merged.iterdir() if p.name.startswith(".merge-")], "the merge left its spool behind"


class _Tracked(dict[str, Any]):
    """A decoded host record whose life the test can see (a dict cannot be weakly referenced)."""


def test_a_merge_decodes_each_record_once_and_holds_a_bounded_number(fleet: dict[str, Any],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    live: set[int] = set()
    peak = [0]
    decoded: dict[str, int] = {}

    def tracked(stored: dict[str, Any]) -> dict[str, Any]:
        rec = _Tracked(stored)
        name = str(rec.get("name"))
        decoded[name] = decoded.get(name, 0) + 1
        key = id(rec)
        live.add(key)
        peak[0] = max(peak[0], len(live))
        weakref.finalize(rec, live.discard, key)
        return rec

    real_loads = spool.json.loads

    def parsed(text: Any, *a: Any, **k: Any) -> Any:
        # a schema-3 record is its plain text (store/members.py): parsing it is what decoding was
        value = real_loads(text, *a, **k)
        return tracked(value) if isinstance(value, dict) and "name" in value and "facts" in value else value

    monkeypatch.setattr(spool.json, "loads", parsed)
    result, _ = merge_runs(list(fleet["parts"]), fleet["tmp"] / "merged-in-process")
    monkeypatch.undo()
    n = len(_names())
    assert len(result.fleet.hosts) == n
    assert sorted(decoded) == sorted(_names())  # every record was read ...
    assert max(decoded.values()) == 1  # ... once
    assert peak[0] <= 2, f"{peak[0]} decoded records alive at once"


def test_a_damaged_record_is_carried_as_what_readers_get(fleet: dict[str, Any], tmp_path: Path) -> None:
    """A record whose stored text does not decode is not copied as it is: the merged run holds what
    every reader of the part gets (its name, that it is damaged), and the other records are copied."""
    part = tmp_path / "s1"
    shutil.copytree(fleet["parts"][0], part)
    # a run stored in schema 2 (tests/support/schema2.py: its own writer), whose records' text the
    # test can damage in place; schema 3's damaged members: the test after this one
    write_schema_2(part / "fleet.json", read_plain(part / "fleet.json"))
    index = json.loads((part / "fleet.index.json").read_text())
    name, offset, length = index["hosts"][0]
    data = bytearray((part / "fleet.json").read_bytes())
    facts_at = data.index(b'"facts":', offset)
    data[facts_at:facts_at + 8] = b'"facts":'  # same length: the index still matches
    text = bytes(data[offset:offset + length]).replace(b'"@table"', b'"@tablX"', 1)
    assert len(text) == length
    data[offset:offset + length] = text
    st = (part / "fleet.json").stat()
    (part / "fleet.json").write_bytes(bytes(data))
    os.utime(part / "fleet.json", ns=(st.st_atime_ns, st.st_mtime_ns))
    result, _ = merge_runs([part, *fleet["parts"][1:]], tmp_path / "out")
    rec = result.fleet.hosts.record(name)
    assert rec is not None
    assert any("does not read back" in e for e in rec["normalize_errors"])
    merged = read_plain(result.run.dir / "fleet.json")
    assert len(merged["hosts"]) == len(_names())


@pytest.mark.parametrize("schema", [2, 3])
def test_a_record_that_is_not_json_any_more_is_merged_as_not_judged(fleet: dict[str, Any], tmp_path: Path,
                                                                    schema: int) -> None:
    """A byte of a stored record broken so that it no longer parses (schema 2), or its compressed
    member broken so that it no longer decompresses (schema 3; the index still matches either way):
    the merge keeps the host, as every reader of the part has it, as failed and not judged with
    why, never as a host that answered and passed; the other records are merged as they were."""
    from orchestrator.store.history import load_fleet
    from orchestrator.verdict.result import FleetResult

    part = tmp_path / "s1"
    shutil.copytree(fleet["parts"][0], part)
    if schema == 2:
        write_schema_2(part / "fleet.json", read_plain(part / "fleet.json"))
    healthy = {h["name"] for h in read_plain(part / "fleet.json")["hosts"] if h["health"]["state"] == "healthy"}
    name, offset, _length = next(e for e in json.loads((part / "fleet.index.json").read_text())["hosts"]
                                 if e[0] in healthy)  # no finding of its own says it failed
    data = bytearray((part / "fleet.json").read_bytes())
    if schema == 2:
        at = data.index(b'"outcome"', offset)
        data[at] = ord("x")  # an unquoted key: not JSON, same length
    else:
        data[offset + 20:offset + 28] = b"\xff" * 8  # inside its first member's deflate data
    st = (part / "fleet.json").stat()
    (part / "fleet.json").write_bytes(bytes(data))
    os.utime(part / "fleet.json", ns=(st.st_atime_ns, st.st_mtime_ns))
    shown = FleetResult.from_document(load_fleet(part)).hosts.by_name(name)
    result, _ = merge_runs([part, *fleet["parts"][1:]], tmp_path / "out")
    for host in (shown, result.fleet.hosts.by_name(name)):
        assert host is not None
        assert (host.outcome, host.health.state.value) == ("failed", "incomplete"), host
        assert "does not read back" in host.reason and "not judged" in host.health.reason, host
    assert result.fleet.summary.health["incomplete"] >= 1
    assert len(result.fleet.hosts) == len(_names())


def test_a_rejudged_run_keeps_no_spool(fleet: dict[str, Any]) -> None:
    """A rejudge judged in workers spools its records beside the staged run, not in it: a spool in
    it would be renamed into the published run and outlive the command (a copy of every record)."""
    results = fleet["cli"].results  # where the Cli puts every run a command makes
    _probe(fleet["cli"], 2, "rejudge", str(fleet["whole"]))
    rejudged = [d for d in results.iterdir() if (d / "run.json").is_file()
                and json.loads((d / "run.json").read_text()).get("rejudged_from") == "whole"]
    assert len(rejudged) == 1
    assert not [p.name for p in results.rglob(".verdict-*")], "the rejudge left its spool behind"


def test_parts_decoded_at_once_in_workers_each_write_files_of_their_own(fleet: dict[str, Any], tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """`probe merge` decodes the next part in workers while it judges the part before: two parts'
    workers then run at once, and every record they must encode again (here: all of them) goes to
    a spool file of that worker's own, none to a file another worker writes, and none is left for
    this process to redo (a worker that fails is redone here, which would hide a clash)."""
    from orchestrator.api.stored import load_result
    from orchestrator.store.carry import Carrier
    from orchestrator.verdict.carried import Decoders
    from orchestrator.verdict.result import HostTable

    real = HostTable.carried
    monkeypatch.setattr(HostTable, "carried", lambda self, start=0, stop=None: (
        (rec, None) for rec, _body in real(self, start, stop)))  # forked workers inherit it
    fleets = [load_result(p) for p in fleet["parts"][:2]]
    monkeypatch.setenv("FLEETPROBE_WORKERS", "2")
    with Carrier(tmp_path) as carrier, Decoders(carrier, lambda d: load_result(d).hosts) as decoders:
        parts = [decoders.start(p, f.hosts) for p, f in zip(fleet["parts"], fleets)]  # both sent before either is read
        got = [p.result() for p in parts]
        files = [{body[0].name for _verdict, body in part} for part in got]
        assert all(files) and not files[0] & files[1], files
        assert all(name.startswith("worker") for part in files for name in part), files  # none redone here
        for f, part in zip(fleets, got):
            assert [v.name for v, _ in part] == f.hosts.names()
            for _verdict, (path, offset, length) in part:
                with open(path, "rb") as fh:
                    fh.seek(offset)
                    text = members.unpack(fh.read(length)) + b"}"  # its text, open: a member
                assert json.loads(text)["name"] == _verdict.name


def _merged_pieces(result: Any) -> tuple[bytes, dict[str, Any]]:
    _head, hosts, rest = _pieces(result.run.dir)
    return hosts, rest


def test_the_decoding_workers_are_forked_once_for_every_part(fleet: dict[str, Any], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Forked once, before the merge holds any part's verdicts, and handed each part by its run
    directory; none outlives the merge, and the merge is the one made in this process."""
    from orchestrator.verdict import carried

    forks: list[list[int]] = []
    real = carried.start_workers

    def counted(jobs: Any) -> Any:
        pids = real(jobs)
        forks.append(list(pids or []))
        return pids

    monkeypatch.setattr(carried, "start_workers", counted)
    monkeypatch.setenv(WORKERS_ENV, "2")
    in_workers, _ = merge_runs(list(fleet["parts"]), tmp_path / "workers")
    assert len(fleet["parts"]) == SHARDS > 1 and len(forks) == 1 and len(forks[0]) == 2, forks
    for pid in forks[0]:
        with pytest.raises(ChildProcessError):  # reaped, not left running or as a zombie
            os.waitpid(pid, os.WNOHANG)
    monkeypatch.setenv(WORKERS_ENV, "1")
    here, _ = merge_runs(list(fleet["parts"]), tmp_path / "here")
    assert len(forks) == 1
    assert _merged_pieces(in_workers) == _merged_pieces(here)


@pytest.mark.parametrize("when", ["before its part is sent", "while its part is decoded"])
def test_a_decoding_worker_that_dies_costs_nothing_but_time(fleet: dict[str, Any], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch, when: str) -> None:
    """A worker killed between parts or in the middle of one: that part and the ones after it are
    decoded in this process, and the merged run is the one the workers would have made."""
    import signal

    from orchestrator.verdict import carried

    monkeypatch.setenv(WORKERS_ENV, "1")
    want, _ = merge_runs(list(fleet["parts"]), tmp_path / "here")
    monkeypatch.setenv(WORKERS_ENV, "2")
    pids: list[int] = []
    real_start, real_send = carried.start_workers, carried.Decoders._send
    monkeypatch.setattr(carried, "start_workers", lambda jobs: pids.extend(real_start(jobs) or []) or pids)
    sent = [0]

    def send(self: Any, run_dir: Path, n: int) -> Any:
        sent[0] += 1
        if sent[0] == 2 and when == "before its part is sent":
            os.kill(pids[1], signal.SIGKILL)
            os.waitpid(pids[1], 0)
        outs = real_send(self, run_dir, n)
        if sent[0] == 2 and when == "while its part is decoded":
            os.kill(pids[0], signal.SIGKILL)
        return outs

    monkeypatch.setattr(carried.Decoders, "_send", send)
    got, _ = merge_runs(list(fleet["parts"]), tmp_path / "killed")
    assert sent[0] >= 2 and len(pids) == 2
    assert _merged_pieces(got) == _merged_pieces(want)
    del got, want  # the merged run's records own the spool while it is held
    gc.collect()
    assert not [p for p in (tmp_path / "killed").iterdir() if p.name.startswith(".merge-")], "spool left behind"
