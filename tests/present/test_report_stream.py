"""The HTML report of a stored fleet read host by host (fleet.json through its index: records
parsed one at a time, in two passes) is the report of the same fleet.json parsed whole."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from orchestrator.engine.results import HostInput
from orchestrator.store.compact import read_plain
from orchestrator.store.fleet_file import read_fleet, write_fleet
from orchestrator.store.spool import SpooledRecords
from orchestrator.verdict.expectations import Expectations
from orchestrator.verdict.judge import build_fleet
from tests.support.demo_inputs import copies
from tests.support.judged import meta
from tests.support.judged import report as render_report


class _Counting(SpooledRecords):
    """A stored fleet's records that count how often they are parsed."""

    reads = 0

    def __getitem__(self, i: Any) -> Any:
        type(self).reads += 1
        return super().__getitem__(i)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self[i] for i in range(len(self)))


def test_report_of_a_stored_fleet_read_by_index_is_the_report_of_it_parsed_whole(
        demo_inputs: list[HostInput], tmp_path: Path) -> None:
    inputs = copies(demo_inputs, 40)
    fleet = build_fleet(meta("r"), inputs, lambda h: Expectations(), lambda host: {}, spool=tmp_path, workers=2).to_document()
    path = write_fleet(tmp_path / "fleet.json", fleet)
    stored = read_fleet(path)
    assert isinstance(stored["hosts"], SpooledRecords)
    whole = read_plain(path)  # the whole file decompressed and parsed (schema 3 on disk)
    assert isinstance(whole["hosts"], list)
    assert render_report(stored, previous=read_fleet(path)) == render_report(whole, previous=whole)
    # records are parsed as they are read, a bounded number of times each: nothing holds the fleet
    counting = _Counting(remove=False, version=stored["hosts"].version)
    for i in range(len(stored["hosts"])):
        counting.add(path, *_entry(stored["hosts"], i))
    assert render_report({**stored, "hosts": counting}) == render_report(whole)
    assert _Counting.reads <= 2 * len(inputs)


def _entry(records: SpooledRecords, i: int) -> tuple[int, int, str]:
    _, offset, length, name = records._entries[i]
    return offset, length, name
