"""Normalize the `nic` probe's sysfs readings into `facts["nic"]` (docs/facts-nic.md).  Pure.

Port state and physical state lose their numeric prefix ("4: ACTIVE" -> "ACTIVE"), the rate text
becomes Gb/s, bus ids the facts convention; a net interface's speed of -1 (no link) becomes None.
GUIDs are written as sysfs writes them (`7425:5403:0035:3ded`), whichever side read them; an HCA's
product comes from its `hca_type` (facts/gpu_models.NIC_MODELS).
"""

from __future__ import annotations

import re
from typing import Any

from orchestrator.facts import gpu_models
from orchestrator.facts.model import NetDev, NicDevice, NicFacts, NicGdr, NicPort
from orchestrator.facts.normalize.gpus import bus_id
from orchestrator.facts.numbers import INDEX, NET_GBITS, float_or_none, value_int

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*Gb/sec")


def _state(text: Any) -> str | None:
    if not isinstance(text, str) or not text.strip():
        return None
    return text.split(":", 1)[-1].strip() or None


def rate_gbps(text: Any) -> float | None:
    m = _RATE.match(text) if isinstance(text, str) else None
    return float_or_none(m.group(1), NET_GBITS) if m else None  # '9999...9 Gb/sec' is no rate: unknown


def _counters(raw: Any) -> dict[str, int]:
    if not isinstance(raw, dict):
        return {}
    return {str(k): int(v) for k, v in raw.items() if isinstance(v, int) and not isinstance(v, bool)}


def _port(raw: dict[str, Any]) -> NicPort | None:
    """A port's readings; None for a port without a port number (ibstat text can write one of any
    length): it costs only itself."""
    port = value_int(raw.get("port"), INDEX)[0]
    if port is None:
        return None
    out: NicPort = {
        "port": port,
        "link_layer": raw.get("link_layer") or None,
        "state": _state(raw.get("state")),
        "phys_state": _state(raw.get("phys_state")),
        "rate_gbps": rate_gbps(raw.get("rate")),
        "rate": raw.get("rate") or None,
        "netdev": raw.get("netdev") or None,
        "counters": _counters(raw.get("counters")),
        "hw_counters": _counters(raw.get("hw_counters")),
        "port_guid": raw.get("port_guid") or None,
    }
    for key in ("active_mtu", "max_mtu"):  # ibv_devinfo text only: sysfs has no file for them
        if key in raw:
            value = raw[key]
            out[key] = value if isinstance(value, int) and not isinstance(value, bool) else None
    return out


def _device(raw: dict[str, Any]) -> NicDevice:
    out: NicDevice = {
        "name": str(raw.get("name")),
        "bus_id": bus_id(raw.get("bus_id")),
        "hca_type": raw.get("hca_type") or None,
        "board_id": raw.get("board_id") or None,
        "fw_ver": raw.get("fw_ver") or None,
        "node_guid": raw.get("node_guid") or None,
        "driver": raw.get("driver") or None,
        "ports": [x for x in (_port(p) for p in raw.get("ports") or [] if isinstance(p, dict)) if x is not None],
        "sys_image_guid": raw.get("sys_image_guid") or None,
        "model": gpu_models.nic_model(raw.get("hca_type")),
    }
    if raw.get("error"):
        out["error"] = str(raw["error"])  # the HCA could not be read: its ports are unknown, not absent
    return out


def _netdev(raw: dict[str, Any]) -> NetDev:
    speed = raw.get("speed")
    return {
        "name": str(raw.get("name")),
        "bus_id": bus_id(raw.get("bus_id")),
        "driver": raw.get("driver") or None,
        "operstate": raw.get("operstate") or None,
        "carrier": raw.get("carrier") if isinstance(raw.get("carrier"), bool) else None,
        "speed_mbps": speed if isinstance(speed, int) and speed > 0 else None,
        "carrier_changes": raw.get("carrier_changes") if isinstance(raw.get("carrier_changes"), int) else None,
        "mtu": raw.get("mtu") if isinstance(raw.get("mtu"), int) else None,
    }


def normalize(data: dict[str, Any]) -> NicFacts:
    ib = data.get("infiniband")
    return {
        "devices": sorted((_device(d) for d in ib or [] if isinstance(d, dict)), key=lambda d: d["name"]),
        "netdevs": sorted((_netdev(n) for n in data.get("net") or [] if isinstance(n, dict)), key=lambda n: n["name"]),
        "infiniband_present": ib is not None,
        "gdr": _gdr(data.get("gdr")),
    }


def _gdr(raw: Any) -> NicGdr | None:
    if not isinstance(raw, dict):
        return None
    module = "nvidia_peermem" if raw.get("nvidia_peermem") else "nv_peer_mem" if raw.get("nv_peer_mem") else None
    peers = raw.get("memory_peers")
    return {"peermem_loaded": module is not None, "module": module,
            "memory_peers": [str(x) for x in peers] if isinstance(peers, list) else None}
