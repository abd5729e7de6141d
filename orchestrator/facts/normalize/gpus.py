"""Normalize the `nvml` probe's data into `facts["gpus"]` (shape: docs/facts-gpus.md).  Pure."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, cast

from orchestrator.facts import gpu_models
from orchestrator.facts.gpu_models import PCIE_SPEED_TEXT
from orchestrator.facts.model import GpusFacts

_BUS = re.compile(r"^(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")
P2P_CAPS = ("read", "write", "nvlink", "atomics")


def bus_id(text: Any) -> str | None:
    """Any NVML/CUDA/sysfs spelling -> '0000:bb:dd.f' lower-case; None when not a bus id."""
    if not isinstance(text, str):
        return None
    return _bus_id(text)


# A fleet repeats a few hundred bus ids over and over (identical machines, every link's remote):
# parsing each once is most of what normalization spends on them.  Bounded, so odd input cannot
# grow it without limit.
@lru_cache(maxsize=8192)
def _bus_id(text: str) -> str | None:
    m = _BUS.match(text.strip())
    if not m:
        return None
    dom = int(m.group(1) or "0", 16) & 0xFFFF
    return f"{dom:04x}:{int(m.group(2), 16):02x}:{int(m.group(3), 16):02x}.{m.group(4)}"


def dcgm_bus_id(text: Any) -> str | None:
    """Any bus id spelling -> dcgm-exporter's `pci_bus_id` label ('00000000:53:00.0': NVML's busId,
    an 8-hex-digit domain, upper-case hex), so a fleetprobe series joins the exporter's; None when
    not a bus id."""
    norm = bus_id(text)
    if norm is None:
        return None
    dom, bus, rest = norm.split(":")
    return f"{int(dom, 16):08X}:{bus.upper()}:{rest.upper()}"


def model_key(name: Any) -> str | None:
    """gpu_models.lookup(name).key, remembered: the lookup runs up to 23 regexes per GPU."""
    return _model_key(name) if isinstance(name, str) else None


@lru_cache(maxsize=1024)
def _model_key(name: str) -> str | None:
    model = gpu_models.lookup(name)
    return model.key if model else None


def _with_unknown(out: dict[str, Any], key: str, value: Any, unknown: dict[str, Any]) -> None:
    out[key] = value
    if value is None and key in unknown:
        out[f"{key}_unknown"] = unknown[key]


_TEXT, _NUMBER = (str,), (int, float)
# Each key with the JSON types it may have: a value of another type (a name that is a number or a
# list, memory as a string) is unknown ("malformed: ..."), never handed to a check or a view.
# The "<key>_unknown" names are made once here, not per GPU: every host's records then share one
# string per name instead of holding copies (fleet.json of 10,000 hosts keeps them in memory).
_GPU_KEYS = tuple((k, f"{k}_unknown", types) for k, types in (
    ("uuid", _TEXT), ("name", _TEXT), ("serial", _TEXT), ("board_part_number", _TEXT), ("vbios", _TEXT),
    ("pci_device_id", _TEXT), ("memory_total_bytes", _NUMBER), ("memory_used_bytes", _NUMBER),
    ("architecture", _TEXT), ("compute_capability", _TEXT), ("persistence_mode", (str, bool)),
    ("compute_mode", _TEXT), ("virtualization_mode", _TEXT), ("numa_node", _NUMBER), ("cpu_affinity", _TEXT),
    ("temperature_c", _NUMBER), ("power_w", _NUMBER), ("minor_number", _NUMBER),
    ("clock_event_reasons", (int,)), ("pcie_replays", (int,)), ("retired_pages_pending", (bool,))))


def _gpu(raw: dict[str, Any]) -> dict[str, Any]:
    unknown = dict(raw.get("unknown") or {})
    g: dict[str, Any] = {"index": raw.get("index")}
    _with_unknown(g, "bus_id", bus_id(raw.get("bus_id")), unknown)
    for key, key_unknown, types in _GPU_KEYS:
        value = g[key] = raw.get(key)
        if value is None:
            if key in unknown:
                g[key_unknown] = unknown[key]
        elif not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            g[key] = None  # a bool is not a number here: True is not 1 GiB of memory
            g[key_unknown] = f"malformed: the host sent {type(value).__name__} {str(value)[:40]!r}"
    if g["bus_id"] is None and "bus_id_unknown" not in g:
        g["bus_id_unknown"] = unknown.get("handle", "no PCI info")
    g["model"] = model_key(g.get("name"))
    g["mig"] = _mig(raw.get("mig"))
    if g["mig"] is None:
        g["mig_unknown"] = unknown.get("mig", "not reported")
    pcie = dict(raw.get("pcie") or {})
    pu = pcie.pop("unknown", {}) or {}
    p: dict[str, Any] = {}
    # the host's maximum is printed by nvidia-smi -q ("Host Max"); NVML's probe does not read it
    for key in ("gen_current", "gen_max", "gen_gpu_max", "width_current", "width_max",
                *(("gen_host_max",) if "gen_host_max" in pcie else ())):
        _with_unknown(p, key, pcie.get(key), pu)
    p["speed_current"] = PCIE_SPEED_TEXT.get(p["gen_current"]) if p["gen_current"] else None
    p["speed_max"] = PCIE_SPEED_TEXT.get(p["gen_max"]) if p["gen_max"] else None
    g["pcie"] = p
    fans = raw.get("fans")
    g["fans"] = list(fans) if isinstance(fans, list) else None
    g["fans_unknown"] = unknown.get("fans") if g["fans"] is None else None
    g["clock_event_reason_names"] = (clock_reason_names(g["clock_event_reasons"])
                                     if isinstance(g["clock_event_reasons"], int) else None)
    for key in ("ecc", "remapped_rows", "fabric", "power_limits"):
        v = raw.get(key)
        g[key] = dict(v) if isinstance(v, dict) else None
        if g[key] is None:
            g[f"{key}_unknown"] = unknown.get(key, "not reported")
    # a source that cannot tell a lost GPU from a missing one (text) names why: unknown, not False
    g["lost"] = None if raw.get("lost") is None and "lost" in unknown else (
        bool(raw.get("lost")) or "GPU_IS_LOST" in unknown.values())
    g["unknown"] = unknown
    _health_readings(raw, g, unknown)
    return g


def _mig(mig: Any) -> dict[str, Any] | None:
    """MIG mode as NVML answers it; a mode the source did not state (text: `-L` lists MIG devices
    but not the pending mode) stays None beside its `<mode>_unknown` reason, never False."""
    if not isinstance(mig, dict):
        return None
    out: dict[str, Any] = {}
    for key in ("current", "pending"):
        why = mig.get(f"{key}_unknown")
        out[key] = None if mig.get(key) is None and why else bool(mig.get(key))
        if out[key] is None:
            out[f"{key}_unknown"] = why
    out["instances"] = list(mig.get("instances") or [])
    return out


def _health_readings(raw: dict[str, Any], g: dict[str, Any], unknown: dict[str, Any]) -> None:
    """The nvml 1.2 readings (issue 18): violation times, thermal thresholds/margin, the recovery
    action, and the fabric health mask's fields by name; nvml 1.3's InfoROM image version.  A
    recording of an older probe has none of them: each is None with "not reported", so its checks
    are not judged."""
    for key, types in (("violation_ns", (dict,)), ("thermal", (dict,)), ("recovery_action", (str,)),
                       ("inforom_image", (str,))):
        value = raw.get(key)
        g[key] = (dict(value) if isinstance(value, dict) else value) if isinstance(value, types) else None
        if g[key] is None:
            g[f"{key}_unknown"] = unknown.get(key, "not reported by this probe version")
    fab = g.get("fabric")
    if isinstance(fab, dict) and isinstance(fab.get("health_mask"), int) and not isinstance(fab["health_mask"], bool):
        fab["health"] = fabric_health(fab["health_mask"])


# NVML_GPU_FABRIC_HEALTH_MASK_* (nvml.h, fabric info v2/v3): (name, shift, width mask, value names).
# The flags answer not_supported / true / false; incorrect_configuration names what is wrong.
FABRIC_HEALTH_FIELDS: tuple[tuple[str, int, int, dict[int, str]], ...] = (
    ("degraded_bw", 0, 0x3, {0: "not_supported", 1: "true", 2: "false"}),
    ("route_recovery", 2, 0x3, {0: "not_supported", 1: "true", 2: "false"}),
    ("route_unhealthy", 4, 0x3, {0: "not_supported", 1: "true", 2: "false"}),
    ("access_timeout_recovery", 6, 0x3, {0: "not_supported", 1: "true", 2: "false"}),
    ("incorrect_configuration", 8, 0xF, {0: "not_supported", 1: "none", 2: "incorrect_sysguid",
                                         3: "incorrect_chassis_sn", 4: "no_partition", 5: "insufficient_nvlinks"}),
)


def fabric_health(mask: int) -> dict[str, str]:
    """The fabric health mask's fields by name; a value the table does not know stays visible."""
    out = {}
    for name, shift, width, values in FABRIC_HEALTH_FIELDS:
        v = (mask >> shift) & width
        out[name] = values.get(v, f"unknown({v})")
    return out


# nvmlClocksEventReason* bits (nvml.h), named as nvidia-smi -q names them in "Clocks Event Reasons".
CLOCK_REASON_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"), (0x2, "applications_clocks"), (0x4, "sw_power_cap"), (0x8, "hw_slowdown"),
    (0x10, "sync_boost"), (0x20, "sw_thermal"), (0x40, "hw_thermal"), (0x80, "hw_power_brake"),
    (0x100, "display_clocks"))


def clock_reason_names(bits: int) -> list[str]:
    names = [name for bit, name in CLOCK_REASON_BITS if bits & bit]
    rest = bits & ~sum(b for b, _ in CLOCK_REASON_BITS)
    return names + ([f"0x{rest:x}"] if rest else [])


def _matrix(raw: Any, n: int) -> list[list[Any]]:
    """n x n: the strings of `raw` where it has them, None elsewhere (short rows padded)."""
    if not isinstance(raw, list):
        return [[None] * n for _ in range(n)]
    out: list[list[Any]] = []
    for row in raw[:n]:
        if isinstance(row, list):
            cells = [v if isinstance(v, str) else None for v in row[:n]]
            if len(cells) < n:
                cells.extend([None] * (n - len(cells)))
            out.append(cells)
        else:
            out.append([None] * n)
    while len(out) < n:
        out.append([None] * n)
    return out


def unresponsive_calls(raw: Any) -> list[dict[str, Any]]:
    """The driver calls a probe's watch gave up on (prelude fp_watched): call, subject ("GPU 3"),
    seconds waited and the limit; the probe answered without them (nvml/nvlink 1.x, p2p 1.1)."""
    out = []
    for c in raw if isinstance(raw, list) else []:
        if isinstance(c, dict) and isinstance(c.get("call"), str):
            out.append({"call": c["call"], "subject": c.get("subject") if isinstance(c.get("subject"), str) else None,
                        "waited_s": c.get("waited_s") if isinstance(c.get("waited_s"), (int, float)) else None,
                        "limit_s": c.get("limit_s") if isinstance(c.get("limit_s"), (int, float)) else None})
    return out


def _any(unknown: dict[str, Any], key: str, values: list[bool | None]) -> bool | None:
    """True where any GPU says so; else False, or None where the source names why it cannot
    tell (text: a GPU whose MIG or virtualization mode it does not print)."""
    if any(v is True for v in values):
        return True
    return None if key in unknown and not (values and all(v is False for v in values)) else False


def normalize(data: dict[str, Any]) -> GpusFacts:
    unknown = dict(data.get("unknown") or {})
    gpus = [_gpu(g) for g in data.get("gpus") or [] if isinstance(g, dict)]
    n = len(gpus)
    out: dict[str, Any] = {}
    for key in ("driver_version", "nvml_version", "cuda_driver_version", "count"):
        _with_unknown(out, key, data.get(key), unknown)
    out["list"] = gpus
    out["order"] = [g["bus_id"] for g in gpus]
    # a source without the matrix (text with no topo -m) names why: null, not a matrix of nulls
    out["levels"] = None if data.get("levels") is None and "levels" in unknown else _matrix(data.get("levels"), n)
    if out["levels"] is None:
        out["levels_unknown"] = unknown["levels"]
    p2p = data.get("p2p") or {}
    # a source that names why it lacks some peer capabilities (text without topo -p2p) gets the
    # matrices it has, not n x n nulls for the others (8,000 claimed GPUs: 64 million cells each)
    partial = isinstance(unknown.get("p2p"), str) and isinstance(data.get("p2p"), dict)
    out["p2p"] = {cap: _matrix(p2p.get(cap), n) for cap in P2P_CAPS if not partial or cap in p2p}
    out["pairs_unknown"] = unknown.get("pairs") or {}
    out["missing_symbols"] = list(data.get("missing_symbols") or [])
    out["mig_enabled_any"] = _any(unknown, "mig_enabled_any", [(g["mig"] or {}).get("current") for g in gpus])
    out["virtualized"] = _any(unknown, "virtualized", [None if g["virtualization_mode"] is None
                                                      else g["virtualization_mode"] != "none" for g in gpus])
    for key in ("mig_enabled_any", "virtualized"):
        if out[key] is None:
            out[f"{key}_unknown"] = unknown[key]
    if data.get("unresponsive"):
        out["unresponsive"] = unresponsive_calls(data["unresponsive"])
    return cast(GpusFacts, out)  # built key by key above
