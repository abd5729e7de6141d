"""The judged fleet reads its host records through files/records.py:HostRecords and never asks how
they are kept (issue 46): a record source of this test's own, neither the in-memory list nor the
store's spool, reads through FleetResult's public API as the same records in a list do, and its
own lookups (by name, a drift digest, records with only some facts) are the ones used."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.files.records import Body, HostRecords, RecordList
from orchestrator.store.history import load_fleet
from orchestrator.store.runmeta import RunMeta
from orchestrator.verdict.result import FleetResult, fleet_result

V1_RUN = Path(__file__).resolve().parents[1] / "fixtures" / "runs_v1" / "20261201T134403Z-916ca5822"


class TextRecords:
    """Host records kept as JSON text by host name, parsed at each read, every read noted."""

    def __init__(self, records: list[dict[str, Any]]) -> None:
        self._order = [str(r["name"]) for r in records]
        self._texts = {str(r["name"]): json.dumps(r) for r in records}
        self.reads: list[str] = []
        self.narrowed: list[tuple[str, ...]] = []

    def _read(self, name: str) -> dict[str, Any]:
        self.reads.append(name)
        rec: dict[str, Any] = json.loads(self._texts[name])
        return rec

    def __len__(self) -> int:
        return len(self._order)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self._read(self._order[i])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[i] for i in range(len(self)))

    def names(self) -> list[str]:
        return list(self._order)

    def by_name(self, name: str) -> dict[str, Any] | None:
        return self._read(name) if name in self._texts else None

    def digest_by_name(self, name: str) -> str | None:
        return f"digest-of-{name}" if name in self._texts else None

    def with_facts(self, sections: Collection[str]) -> Iterator[dict[str, Any]]:
        self.narrowed.append(tuple(sections))
        for rec in self:
            rec["facts"] = {k: v for k, v in rec["facts"].items() if k in sections}
            yield rec

    def body(self, i: int) -> tuple[dict[str, Any], Body | None]:
        return self[i], None


def _records() -> list[dict[str, Any]]:
    return [dict(r) for r in load_fleet(V1_RUN)["hosts"]]


def _both() -> tuple[FleetResult, FleetResult, TextRecords]:
    doc = dict(load_fleet(V1_RUN))
    source = TextRecords(_records())
    return FleetResult.from_document({**doc, "hosts": _records()}), FleetResult.from_document(
        {**doc, "hosts": source}), source


def test_a_record_source_of_its_own_is_a_host_records() -> None:
    assert isinstance(TextRecords([]), HostRecords) and isinstance(RecordList(), HostRecords)
    assert not any(isinstance(x, HostRecords) for x in ([], (), {}, "hosts", None))


def test_a_fleet_over_a_record_source_of_its_own_reads_as_the_same_records_in_a_list() -> None:
    listed, sourced, source = _both()
    assert sourced.problems == listed.problems == []
    assert len(sourced.hosts) == 3 and sourced.hosts.names() == listed.hosts.names()
    assert [(h.name, h.health, h.facts) for h in sourced.hosts] == [(h.name, h.health, h.facts) for h in listed.hosts]
    assert sourced.summary == listed.summary and sourced.health_counts == listed.health_counts
    assert [h.name for h in sourced.problem_hosts] == [h.name for h in listed.problem_hosts] != []
    assert sourced.failed_hosts == listed.failed_hosts
    assert () in source.narrowed  # the tables of names and health asked the source for no facts
    assert [(h.name, s) for h, s in sourced.check_states()] == [(h.name, s) for h, s in listed.check_states()]
    for name in listed.hosts.names():
        assert sourced.hosts.record(name) == listed.hosts.record(name)
    assert list(sourced.to_document()["hosts"]) == list(listed.to_document()["hosts"])
    assert [rec for rec, _ in sourced.hosts.carried()] == [rec for rec, _ in listed.hosts.carried()]
    assert all(body is None for _, body in sourced.hosts.carried(1, 3))
    assert sourced.hosts.by_name("no-such-host") is None and sourced.hosts.record("no-such-host") is None


def test_the_fleet_asks_the_source_itself_for_its_lookups() -> None:
    listed, sourced, source = _both()
    source.reads.clear()
    h = sourced.hosts.by_name("dgx-h100-05")
    assert h is not None and h.name == "dgx-h100-05" and source.reads == ["dgx-h100-05"]  # one host read, not all
    assert sourced.hosts.digest_by_name("dgx-a100-03") == "digest-of-dgx-a100-03"  # only the source knows it
    assert listed.hosts.digest_by_name("dgx-a100-03") is None
    source.narrowed.clear()
    names = [h.name for h in sourced.hosts.with_facts(("gpus",))]
    assert names == listed.hosts.names() and source.narrowed == [("gpus",)]
    assert all(set(h.facts) <= {"gpus"} for h in sourced.hosts.with_facts(("gpus",)))


def test_a_judged_fleet_takes_a_record_source_of_its_own() -> None:
    source = TextRecords(_records())
    fleet = fleet_result(RunMeta(id="r1"), source, [], [], [], {}, {})
    assert [h.name for h in fleet.hosts] == source.names() and fleet.summary.hosts == 3
    assert fleet.hosts.digest_by_name("dgx-h100-01") == "digest-of-dgx-h100-01"


@pytest.mark.parametrize("hosts", ["dgx-h100-01", {"dgx-h100-01": {}}, 3, None, b"[]", True])
def test_hosts_that_are_neither_records_nor_a_source_cost_the_hosts_and_say_so(hosts: Any) -> None:
    fleet = FleetResult.from_document({**load_fleet(V1_RUN), "hosts": hosts})
    assert fleet.problems == ["its hosts are not a list; no host is shown"]
    assert len(fleet.hosts) == 0 and list(fleet.hosts) == [] and fleet.hosts.names() == []


def test_records_written_in_a_document_are_each_checked_for_their_host() -> None:
    records: list[Any] = [*_records(), "x", {"name": ""}, {"name": 7}, None]
    for hosts in (records, tuple(records)):
        fleet = FleetResult.from_document({**load_fleet(V1_RUN), "hosts": hosts})
        assert fleet.hosts.names() == ["dgx-h100-01", "dgx-h100-05", "dgx-a100-03"]
        assert fleet.problems == [f"host record {i} names no host: left out" for i in (3, 4, 5, 6)]


def test_a_host_read_whole_for_its_coverage_keeps_only_the_sections_asked_for() -> None:
    """A record stored without its not-judged ids is read whole (its facts say what was measured);
    the host handed over still holds only the sections asked for: `-q` holds every unhealthy
    host, and 100,000 of them with their whole facts were gigabytes."""
    records = [{k: v for k, v in r.items() if k != "not_judged"} for r in _records()]
    assert any(len(r.get("facts") or {}) > 1 for r in records)
    fleet = FleetResult.from_document({**dict(load_fleet(V1_RUN)), "hosts": TextRecords(records)})
    whole = {h.name: h for h in fleet.hosts}
    for host in fleet.hosts.with_facts(("host",)):
        assert set(host.facts) <= {"host"}, host.name
        assert host.not_judged == whole[host.name].not_judged  # worked out from the whole record
        assert host.facts.get("host") == whole[host.name].facts.get("host")


def test_hosts_that_were_not_judged_alike_share_one_table_of_why() -> None:
    same = {"gpu.count.mismatch": "no expectation gpu_count set", "p2p.outlier": "p2p probe not in this run"}
    records = [{**r, "not_judged": dict(same)} for r in _records()]
    records[-1]["not_judged"] = {**same, "p2p.outlier": "the host's own reason"}
    fleet = FleetResult.from_document({**dict(load_fleet(V1_RUN)), "hosts": TextRecords(records)})
    hosts = list(fleet.hosts.with_facts(()))
    assert len(hosts) > 2
    assert all(h.not_judged == same and h.not_judged is hosts[0].not_judged for h in hosts[:-1])
    assert hosts[-1].not_judged == {**same, "p2p.outlier": "the host's own reason"}
