"""facts/read.py reads stored facts, which may be old or damaged: every reader answers None or
empty for a section of another shape, never an exception (drift and the machine outputs rely on it)."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.facts import read

ODD: list[Any] = [None, 5, True, "text", [], [1, "x", None], {}, {"a": 1}, [[1, 2], "row"], {"@v": 1}]
READERS = [read.gpus, read.gpu_count, read.nvlinks, read.nvlink_links_up, read.level_matrix, read.bandwidths,
           read.p2p_min_gbps, read.gpu_p2p_min_gbps, read.gpu_gauges, read.host_identity]
SECTIONS = ("host", "pcie", "gpus", "nvlink", "topology", "p2p")
# the keys each reader looks into, each given every odd value in turn
KEYS = {"gpus": ("list", "driver_version"), "pcie": ("gpus",), "nvlink": ("gpus", "links_up_total"),
        "topology": ("devices", "matrix"), "p2p": ("pairs", "summary", "min_gbps"), "host": ("board", "driver")}


@pytest.mark.parametrize("odd", ODD, ids=repr)
def test_every_reader_survives_odd_sections_and_odd_keys(odd: Any) -> None:
    shapes: list[Any] = [odd, {s: odd for s in SECTIONS}]
    shapes += [{s: {k: odd for k in keys}} for s, keys in KEYS.items()]
    shapes += [{"gpus": {"list": [{"index": odd, "bus_id": odd, "pcie": odd}]},
                "nvlink": {"gpus": [{"bus_id": odd, "links": odd}, {"index": 0, "links": [odd, {"link": odd}]}]},
                "topology": {"devices": [odd, {"bus_id": odd}], "matrix": [[odd, odd], odd]},
                "p2p": {"pairs": [{"src_bus_id": odd, "dst_bus_id": "0000:01:00.0", "ce_gbps": odd}]},
                "host": {"board": {"model": odd}, "driver": {"version": odd}}}]
    for facts in shapes:
        for reader in READERS:
            reader(facts)  # an exception fails the test


def test_a_record_whose_facts_are_no_object_reads_as_no_facts() -> None:
    assert read.host_facts({"facts": [1, 2]}) == {} and read.host_facts({}) == {}
    assert read.level_matrix({"topology": {"devices": 5, "matrix": [[None, "NV1"], ["NV1", None]]}}) == {}
