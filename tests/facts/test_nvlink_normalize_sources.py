"""The nvlink normalizer serves every source (issue 48 item 5): the probe, which sees remote ends
and every link, and a text import, which sees neither all links nor any remote end.  What a
source could not see stays unknown; the probe's own payloads normalize as before."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.facts.normalize.nvlink import normalize


def _link(n: int, state: str | None, **extra: Any) -> dict[str, Any]:
    return {"link": n, "state": state, "version": None, "remote_bus_id": None, "remote_type": None,
            "p2p_supported": None, "sysmem_access": None, "p2p_atomics": None, "errors": None, "unknown": {},
            **extra}


def _gpu(index: int, links: list[dict[str, Any]], **unknown: str) -> dict[str, Any]:
    return {"index": index, "bus_id": f"0000:{0x18 + index:02x}:00.0", "uuid": None, "name": None,
            "links": links, "unknown": dict(unknown)}


# (what the text showed, the GPU as text hands it on, links_up, inactive): each a source that lists
# part of a GPU's links or none of them; its link count is never len(links)
EXCERPTS = {
    "partial listing": (_gpu(0, [_link(0, "up"), _link(1, "down")], links_total="partial listing (2 link lines)"),
                        1, [1]),
    "all links inActive": (_gpu(0, [], links_total="nvidia-smi printed 'all links are inActive'"), 0, None),
    "capabilities only": (_gpu(0, [_link(0, None), _link(1, None)], links_total="only -c", links_up="only -c"),
                          None, None),
    "topo -m NV# only": (_gpu(0, [], links_total="topo -m NV# only", links_up="not in nvlink -s"), None, None),
}


@pytest.mark.parametrize("name", EXCERPTS)
def test_a_source_that_lists_part_of_the_links_leaves_the_counts_unknown(name: str) -> None:
    gpu, up, inactive = EXCERPTS[name]
    full = _gpu(1, [_link(0, "up"), _link(1, "up")])
    out = normalize({"gpus": [gpu, full], "remote_ends": False})
    g = out["gpus"][0]
    assert g["links_total"] is None and g["links_up"] == up and g["inactive"] == inactive
    assert out["links_total"] is None and out["links_up_total"] is None  # the host's totals too
    assert out["gpus"][1]["links_total"] == 2 and out["gpus"][1]["links_up"] == 2


def test_a_source_without_remote_ends_infers_no_switch_and_no_pair() -> None:
    gpus = [_gpu(i, [_link(0, "up"), _link(1, "up"), _link(2, "down")]) for i in range(3)]
    text = normalize({"gpus": gpus, "remote_ends": False})
    assert text["pairs"] is None and text["nvswitches"] is None and text["nv"] is None
    assert text["pairs_unknown"] and text["nvswitches_unknown"]
    assert all(lk["remote_type"] is None for g in text["gpus"] for lk in g["links"])
    assert [g["links_up"] for g in text["gpus"]] == [2, 2, 2] and text["links_total"] == 9
    # the probe's payload (remote ends seen, none visible here): NCCL's rule puts them on a switch
    live = normalize({"gpus": gpus})
    assert all(lk["remote_type"] == "nvswitch" for g in live["gpus"] for lk in g["links"] if lk["state"] == "up")
    assert live["nv"] == [[None, 2, 2], [2, None, 2], [2, 2, None]] and live["pairs"] == []
    assert "pairs_unknown" not in live


def test_a_probe_payload_with_a_lost_gpu_counts_as_before() -> None:
    lost = _gpu(0, [_link(0, "up")], uuid="GPU_IS_LOST")
    out = normalize({"gpus": [lost, _gpu(1, [_link(0, "up"), _link(1, "down")])]})
    assert out["gpus"][0]["links_total"] is None and out["gpus"][0]["links_up"] is None
    assert out["gpus"][0]["inactive"] == [] and out["gpus"][0]["lost"] is True
    assert out["links_total"] == 2 and out["links_up_total"] == 1  # the readable GPU's, as before


def test_text_only_link_fields_are_kept_only_where_sent() -> None:
    speed = _link(0, "up", speed_gbps=26.562, sli_supported=True)
    out = normalize({"gpus": [_gpu(0, [speed, _link(1, "up")])], "remote_ends": False})
    first, second = out["gpus"][0]["links"]
    assert first.get("speed_gbps") == 26.562 and first.get("sli_supported") is True
    assert "speed_gbps" not in second and "sli_supported" not in second
