"""The p2p and nccl normalizers' input from a text import (issue 48 item 5): what a tool's output
cannot say arrives as null with a reason and stays null; a probe's payload, which carries none of
these marks, reads as before.  Hostile marks (wrong types, reasons for fields that are not the
section's, a tool table named like a probe matrix) change nothing they should not."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.facts.normalize import nccl as nccl_normalize
from orchestrator.facts.normalize import p2p as p2p_normalize


def _p2p(gpu_extra: dict[str, Any] | None = None, pair_extra: dict[str, Any] | None = None,
         **top: Any) -> dict[str, Any]:
    gpus = [{"index": i, "bus_id": f"0000:{0x18 + i:02x}:00.0", "name": "NVIDIA H100 80GB HBM3", "status": "ok",
             **(gpu_extra or {})} for i in range(2)]
    pairs = [{"src": a, "dst": b, "ce_gbps": 300.0 + a, "peer_enabled": True, "can_access_peer": True,
              **(pair_extra or {})} for a, b in ((0, 1), (1, 0))]
    return {"gpus": gpus, "pairs": pairs, "guard": {"ran": True}, "complete": True, **top}


def test_a_probe_payload_reads_as_before() -> None:
    out = p2p_normalize.normalize(_p2p(bidirectional=[{"a": 0, "b": 1, "total_gbps": 600.0}]))
    assert out["order"] == ["0000:18:00.0", "0000:19:00.0"] and out["summary"]["min_pair"] == "0000:18:00.0->0000:19:00.0"
    assert out["guard"]["ran"] is True and "ran_unknown" not in out["guard"]
    assert [p["staged"] for p in out["pairs"]] == [False, False] and all("unknown" not in p for p in out["pairs"])
    assert out["matrices"]["bidir_gbps"] == [[None, 600.0], [600.0, None]]  # one entry: both directions
    assert not any(k.endswith("_unknown") for k in out)


@pytest.mark.parametrize("bus", [None, "", 0])
def test_a_bus_id_the_tool_does_not_print_is_null_only_with_its_reason(bus: Any) -> None:
    told = p2p_normalize.normalize(_p2p({"bus_id": bus, "unknown": {"bus_id": "not printed by nvbandwidth"}}))
    assert told["order"] == [None, None] and told["summary"]["min_pair"] == "GPU0->GPU1"
    assert told["gpus"][0]["unknown"] == {"bus_id": "not printed by nvbandwidth"}
    # a probe record that lost its bus id, with no reason: as before ("", and the bus-id pair name)
    lost = p2p_normalize.normalize(_p2p({"bus_id": bus}))
    assert lost["order"] == ["", ""] and lost["gpus"][0]["bus_id"] == "" and "unknown" not in lost["gpus"][0]


@pytest.mark.parametrize("unknown", [None, "x", ["can_access_peer"], 7, {"verified": "no check"}])
def test_staged_is_unknown_only_where_the_peer_access_matrix_is(unknown: Any) -> None:
    out = p2p_normalize.normalize(_p2p(pair_extra={"unknown": unknown, "can_access_peer": None}))
    assert [p["staged"] for p in out["pairs"]] == [False, False]
    told = p2p_normalize.normalize(_p2p(pair_extra={"unknown": {"can_access_peer": "no matrix"},
                                                    "can_access_peer": None}))
    assert [p["staged"] for p in told["pairs"]] == [None, None]
    assert [p["peer_enabled"] for p in told["pairs"]] == [True, True]  # a figure: peer access worked


@pytest.mark.parametrize("guard", [{}, {"ran": None}, {"ran": None, "ran_unknown": 3}, {"ran": 0, "ran_unknown": "x"}])
def test_the_guard_is_unknown_only_with_a_reason(guard: dict[str, Any]) -> None:
    out = p2p_normalize.normalize(_p2p(guard=guard))
    assert out["guard"]["ran"] is False and "ran_unknown" not in out["guard"]
    told = p2p_normalize.normalize(_p2p(guard={"ran": None, "ran_unknown": "no busy-GPU guard"}))
    assert told["guard"]["ran"] is None and told["guard"]["forced"] is None
    assert told["guard"]["ran_unknown"] == "no busy-GPU guard"


def test_each_printed_direction_of_the_bidirectional_test_is_kept() -> None:
    entries = [{"a": 0, "b": 1, "total_gbps": 739.22, "directed": True},
               {"a": 1, "b": 0, "total_gbps": 774.45, "directed": True}]
    out = p2p_normalize.normalize(_p2p(bidirectional=entries))
    assert out["matrices"]["bidir_gbps"] == [[None, 739.22], [774.45, None]]
    assert [p["bidir_gbps"] for p in out["pairs"]] == [739.22, 774.45]
    # `directed` other than true is a probe entry: both directions
    loose = p2p_normalize.normalize(_p2p(bidirectional=[{**entries[0], "directed": "yes"}]))
    assert loose["matrices"]["bidir_gbps"] == [[None, 739.22], [739.22, None]]


@pytest.mark.parametrize("tables", [{"ce_gbps": [[1.0]]}, {"verified": [[True]]}, {"x": "not a table"}, [], "x"])
def test_a_tool_table_never_replaces_a_probe_matrix(tables: Any) -> None:
    out = p2p_normalize.normalize(_p2p(tool_matrices=tables))
    assert set(out["matrices"]) == set(p2p_normalize.MATRIX_KEYS)
    assert out["matrices"]["ce_gbps"][0][1] == 300.0


def test_section_reasons_only_for_the_fields_a_source_may_not_see() -> None:
    out = p2p_normalize.normalize(_p2p(unknown={"rank": "not printed", "pairs": "x", "summary": "y", "dmabuf": 5}))
    assert out["rank_unknown"] == "not printed" and out["dmabuf_unknown"] == "5"
    assert "pairs_unknown" not in out and "summary_unknown" not in out
    # a field the source did send keeps its value and gets no reason
    given = p2p_normalize.normalize(_p2p(p2p_rank=[[None, 0], [0, None]], unknown={"rank": "not printed"}))
    assert given["rank"] == [[None, 0], [0, None]] and "rank_unknown" not in given


def _nccl(**top: Any) -> dict[str, Any]:
    lines = ["h:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read",
             "h:1:1 [0] NCCL INFO 2 coll channels, 2 p2p channels, 1 p2p channels per peer"]
    return {"results": [{"op": "all_reduce", "size_bytes": 1 << 20, "busbw_gbps": 100.0}], "debug_lines": lines,
            **top}


@pytest.mark.parametrize("ranks", [None, 1, 0, -4, True, "16", 2.0])
def test_a_run_whose_gpus_are_unknown_reads_the_transport_only_with_ranks(ranks: Any) -> None:
    out = nccl_normalize.normalize(_nccl(ranks=ranks))
    assert out["transport"] is None and out["transports"] == [] and out["gpu_count"] is None
    multi = nccl_normalize.normalize(_nccl(ranks=16))
    assert multi["transport"] == "P2P" and multi["channels"] == 2 and multi["gpu_count"] is None


def test_a_source_s_reasons_replace_the_probe_s_and_hide_nothing_known() -> None:
    told = nccl_normalize.normalize(_nccl(ranks=16, source="nccl-tests", unknown={
        "gpu_count": "16 ranks on 2 hosts", "transport": "never shown: the log named one", "env_overrides": "n/p",
        "env_kept": "n/p", "library": "n/p"}))
    assert told["gpu_count_unknown"] == "16 ranks on 2 hosts" and told["source"] == "nccl-tests"
    assert told["transport"] == "P2P" and "transport_unknown" not in told
    assert (told["env_overrides"], told["env_kept"], told["library"]) == (None, None, None)
    assert told["env_overrides_unknown"] == told["library_unknown"] == "n/p"
    # a probe's payload, with no reasons: its settings are read as before ({} when none)
    probe = nccl_normalize.normalize(_nccl(selected=[0, 1], gpus=[{"bus_id": "0000:18:00.0"}, {"bus_id": "0000:19:00.0"}]))
    assert probe["env_overrides"] == {} and probe["env_kept"] is False and probe["source"] == "probe"
    assert not any(k.startswith(("env_", "library")) and k.endswith("_unknown") for k in probe)


@pytest.mark.parametrize("unknown", [None, "x", ["env_overrides"], 3])
def test_hostile_reason_maps_are_no_reasons(unknown: Any) -> None:
    out = nccl_normalize.normalize(_nccl(unknown=unknown))
    assert out["env_overrides"] == {} and out["library"] is None and "env_overrides_unknown" not in out
