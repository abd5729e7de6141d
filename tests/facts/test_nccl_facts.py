"""facts/normalize/nccl.py: the probe's data -> facts["nccl"], and NCCL's INFO log -> transport/channels.

The log lines are NCCL's own formats as users post them (NVIDIA/nccl issues #487, #1189, #1412,
nccl-tests #133; see tests/fixtures/nccl/SOURCES.md), written out here, not read from outside.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.facts.normalize.nccl import env_overrides, normalize, parse_debug_log

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = ROOT / "orchestrator" / "demo" / "recordings"

NVLS_2_19 = [
    "node:983:1261 [3] NCCL INFO Connected NVLS tree",
    "node:983:1261 [3] NCCL INFO 16 coll channels, 0 collnet channels, 16 nvls channels, 16 p2p channels, "
    "1 p2p channels per peer",
]
P2P_IPC = [
    "node0021:21855:22797 [2] NCCL INFO Channel 00 : 10[39000] -> 9[36000] via P2P/IPC",
    "node0021:21856:22793 [3] NCCL INFO Channel 01 : 11[3b000] -> 10[39000] via P2P/IPC/read",
    "node0014:24061:24912 [7] NCCL INFO Channel 00 : 7[5e000] -> 8[34000] [send] via NET/IB/0",
    "nodea:26799:27025 [0] NCCL INFO 2 coll channels, 2 p2p channels, 1 p2p channels per peer",
]
SHM = [
    "h:1:2 [0] NCCL INFO NCCL version 2.18.3+cuda12.2",
    "h:1:2 [0] NCCL INFO NCCL_P2P_DISABLE set by environment to 1.",
    "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct",
    "h:1:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via SHM/direct/direct",
]
OLD_RINGS = ["h:1:2 [0] NCCL INFO Channel 00/04 :    0   1   2   3"]


def test_transport_and_channels_from_nccl_log_lines() -> None:
    nvls = parse_debug_log(NVLS_2_19)
    assert (nvls["transport"], nvls["channels"], nvls["nvls_channels"]) == ("NVLS", 16, 16)
    mixed = parse_debug_log(P2P_IPC)
    assert mixed["transport"] == "P2P" and mixed["transports"] == ["P2P", "NET"] and mixed["channels"] == 2
    shm = parse_debug_log(SHM)
    assert shm["transport"] == "SHM" and shm["version"] == "2.18.3" and shm["env"] == {"NCCL_P2P_DISABLE": "1"}
    assert shm["channels"] is None
    assert parse_debug_log(OLD_RINGS)["channels"] == 4
    assert parse_debug_log([])["transport"] is None


def test_environment_wins_over_conf_files_and_logging_settings_change_nothing() -> None:
    files = {"/etc/nccl.conf": {"NCCL_P2P_DISABLE": "0", "NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "WARN"}}
    inherited = {"NCCL_P2P_DISABLE": "1", "NCCL_DEBUG_FILE": "/tmp/x"}
    assert env_overrides(inherited, files) == {"NCCL_P2P_DISABLE": "1", "NCCL_SOCKET_IFNAME": "eth0"}
    assert env_overrides(None, None) == {}


def _data(host: str) -> dict[str, Any]:
    env = json.loads((RECORDINGS / host / "nccl.json").read_text())
    assert env["status"] == "ok"
    return env["data"]


def test_recorded_healthy_host_normalizes_to_the_section_shape() -> None:
    f = normalize(_data("dgx-h100-12"))
    assert f["source"] == "probe" and f["version"] == "2.21.5" and f["gpu_count"] == 8
    assert f["transport"] == "NVLS" and f["channels"] == 16 and f["env_overrides"] == {}
    assert f["gpu_model"] == "H100-SXM" and len(f["gpus"]) == 8
    assert [r["size_bytes"] for r in f["results"]] == [1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20]
    assert all(r["wrong"] == 0 and r["op"] == "all_reduce" for r in f["results"])
    busbw = [r["busbw_gbps"] for r in f["results"]]
    assert f["avg_busbw_gbps"] == pytest.approx(sum(busbw) / len(busbw), abs=1e-3)
    assert "transport_unknown" not in f


def test_recorded_hosts_show_shm_and_the_stale_setting() -> None:
    assert normalize(_data("dgx-h100-13"))["transport"] == "SHM"
    env = normalize(_data("dgx-h100-15"))
    assert env["env_overrides"] == {"NCCL_P2P_DISABLE": "1"} and env["env_kept"] is False
    assert env["transport"] == "NVLS"  # measured without the setting


def test_unmeasured_fields_carry_their_reason() -> None:
    one = normalize({"gpus": [{"bus_id": "0000:18:00.0", "name": "NVIDIA H100 80GB HBM3"}], "selected": [0],
                     "results": [{"op": "all_reduce", "size_bytes": 1024, "busbw_gbps": 0.0}], "debug_lines": []})
    assert one["transport"] is None and one["transport_unknown"].startswith("one GPU")
    none = normalize({"limitation": "MIG is enabled on 0000:18:00.0: NCCL cannot span MIG instances"})
    assert none["version"] is None and "version_unknown" in none
    assert none["gpu_count"] is None and none["gpu_count_unknown"].startswith("MIG")
    assert none["avg_busbw_gbps"] is None and "avg_busbw_gbps_unknown" in none
    with pytest.raises(ValueError):
        normalize([])  # type: ignore[arg-type]


def test_malformed_rows_are_dropped_not_guessed() -> None:
    f = normalize({"gpus": "x", "selected": [5], "results": [{"op": 3}, "row", {"op": "all_reduce", "size_bytes": "8"}],
                   "library": [], "env": "x", "debug_lines": "x"})
    assert f["results"] == [] and f["gpu_count"] is None and f["env_overrides"] == {}
