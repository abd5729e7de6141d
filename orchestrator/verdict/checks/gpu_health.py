"""GPU health from the counters and states NVML reports (facts gpus, nvlink): ECC, pending page
retirement, clock event reasons, power limits, PCIe replays and NVLink error counters.  Pure.

Counters cumulative since the driver loaded (PCIe replays, NVLink CRC/replay/recovery) are judged
as growth since the previous run of the same boot (`HostView.previous`, boot id of facts kmsg);
absolute values are judged only where any count is a fault (uncorrectable ECC).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from orchestrator.verdict.checks.base import HostView, Needs
from orchestrator.verdict.checks.nic import same_boot
from orchestrator.verdict.findings import Finding, Severity, fault

# Clock event reasons that mean the hardware is slowing the GPU down (idle, application clocks,
# SW power cap and sync boost are normal operation and not judged).
SLOWDOWN_REASONS = ("hw_slowdown", "hw_thermal", "hw_power_brake")
# A power limit below this share of the board's default is a cap someone set.
POWER_LIMIT_MIN_SHARE = 0.95
# Correctable SRAM errors over the GPU's life at which it is worth a look (fleetprobe's threshold;
# SRAM errors are rarer than DRAM ones and a steady stream of them precedes uncorrectable ones).
SRAM_CORRECTED_WARN = 100


def _gpus(view: HostView) -> list[dict[str, Any]]:
    if view.outcomes and not view.ran("nvml"):
        return []
    return list((view.facts.get("gpus") or {}).get("list") or [])


def _subject(g: dict[str, Any]) -> str:
    return f"GPU{g.get('index')} ({g.get('bus_id') or 'bus id unknown'})"


def _previous_gpus(view: HostView) -> dict[str, dict[str, Any]]:
    """The previous run's GPUs by bus id, when it read the same boot."""
    if not same_boot(view.facts, view.previous):
        return {}
    prev = ((view.previous or {}).get("gpus") or {}).get("list") or []
    return {str(g.get("bus_id")): g for g in prev if g.get("bus_id")}


def _count(d: Any, key: str) -> int | None:
    v = d.get(key) if isinstance(d, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def ecc_uncorrectable(view: HostView) -> Iterator[Finding]:
    for g in _gpus(view):
        ecc = g.get("ecc") or {}
        vol, agg = _count(ecc, "volatile_uncorrected"), _count(ecc, "aggregate_uncorrected")
        locs = ecc.get("locations") or {}
        where = ", ".join(f"{loc.upper()} {_count(locs.get(loc), 'aggregate_uncorrected')}"
                          for loc in ("dram", "sram") if _count(locs.get(loc), "aggregate_uncorrected"))
        kw: dict[str, Any] = {"expected": 0, "actual": {"volatile": vol, "aggregate": agg},
                              "evidence": ["gpus.list.ecc.volatile_uncorrected", "gpus.list.ecc.aggregate_uncorrected"]}
        if vol:
            yield fault("gpu.ecc.uncorrectable", view.name, _subject(g),
                        f"{vol} uncorrectable ECC error(s) since the driver loaded" + (f" (lifetime: {where})" if where else ""),
                        hint="drain the GPU; check row remapping / page retirement and reset it; repeated: RMA", **kw)
        elif agg:
            yield fault("gpu.ecc.uncorrectable", view.name, _subject(g),
                        f"{agg} uncorrectable ECC error(s) over the GPU's life, none since the driver loaded"
                        + (f" ({where})" if where else ""), severity=Severity.WARN,
                        hint="a past uncorrectable error: check that its memory was remapped/retired", **kw)


def ecc_sram_threshold(view: HostView) -> Iterator[Finding]:
    for g in _gpus(view):
        sram = ((g.get("ecc") or {}).get("locations") or {}).get("sram")
        n = _count(sram, "aggregate_corrected")
        if n is not None and n >= SRAM_CORRECTED_WARN:
            yield fault("gpu.ecc.sram_threshold", view.name, _subject(g),
                        f"{n} correctable SRAM ECC errors over the GPU's life (at least {SRAM_CORRECTED_WARN} is a warning)",
                        severity=Severity.WARN, expected=f"< {SRAM_CORRECTED_WARN}", actual=n,
                        evidence=["gpus.list.ecc.locations.sram.aggregate_corrected"],
                        hint="SRAM errors precede uncorrectable ones: watch the rate, run diagnostics (dcgmi diag -r 3)")


def reset_required(view: HostView) -> Iterator[Finding]:
    for g in _gpus(view):
        if g.get("retired_pages_pending") is True:
            yield fault("gpu.reset_required", view.name, _subject(g),
                        "retired memory pages wait for a GPU reset (dynamic page retirement pending)",
                        severity=Severity.WARN, expected=False, actual=True,
                        evidence=["gpus.list.retired_pages_pending"],
                        hint="drain the GPU and reset it (nvidia-smi -r) or reboot, so the pages are retired")


def clocks_slowdown(view: HostView) -> Iterator[Finding]:
    for g in _gpus(view):
        names = g.get("clock_event_reason_names") or []
        hw = [n for n in names if n in SLOWDOWN_REASONS]
        if hw:
            temp = g.get("temperature_c")
            yield fault("gpu.clocks.slowdown", view.name, _subject(g),
                        f"the hardware is slowing the GPU's clocks ({', '.join(hw)})"
                        + (f" at {temp} °C" if temp is not None else ""),
                        severity=Severity.WARN, expected="no HW slowdown", actual=names,
                        evidence=["gpus.list.clock_event_reasons"],
                        hint="HW slowdown halves the clocks or more: check cooling (inlet, fans, heatsink), the "
                             "power supply and the power brake signal; `nvidia-smi -q -d PERFORMANCE`")


def power_limit_low(view: HostView) -> Iterator[Finding]:
    for g in _gpus(view):
        lim = g.get("power_limits") or {}
        cur, default = lim.get("limit_w"), lim.get("default_limit_w")
        enforced = lim.get("enforced_limit_w")
        have = min(v for v in (cur, enforced) if isinstance(v, (int, float))) if isinstance(cur, (int, float)) else None
        if isinstance(have, (int, float)) and isinstance(default, (int, float)) and default > 0 \
                and have < default * POWER_LIMIT_MIN_SHARE:
            yield fault("gpu.power.limit_low", view.name, _subject(g),
                        f"power limit {have:g} W, the board's default is {default:g} W", severity=Severity.WARN,
                        expected=default, actual=have,
                        evidence=["gpus.list.power_limits.limit_w", "gpus.list.power_limits.default_limit_w"],
                        hint="someone capped the GPU (nvidia-smi -pl) or the platform enforces a lower limit; "
                             "restore the default limit if you paid for it")


def pcie_replays(view: HostView) -> Iterator[Finding]:
    prev = _previous_gpus(view)
    for g in _gpus(view):
        before = prev.get(str(g.get("bus_id")))
        now, then = _count(g, "pcie_replays"), _count(before, "pcie_replays")
        if now is not None and then is not None and now > then:
            yield fault("pcie.replays", view.name, _subject(g),
                        f"the GPU's PCIe link replayed {now - then} time(s) since the previous run of this boot",
                        severity=Severity.WARN, expected="no growth", actual={"previous": then, "now": now},
                        evidence=["gpus.list.pcie_replays", "previous run's gpus.list.pcie_replays"],
                        hint="a link that keeps replaying is marginal: check the riser/slot and the AER counters "
                             "along the GPU's upstream chain")


_NVLINK_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")


def nvlink_errors(view: HostView) -> Iterator[Finding]:
    if (view.outcomes and not view.ran("nvlink")) or not same_boot(view.facts, view.previous):
        return
    before = {str(g.get("bus_id")): g for g in ((view.previous or {}).get("nvlink") or {}).get("gpus") or []}
    for g in (view.facts.get("nvlink") or {}).get("gpus") or []:
        old = before.get(str(g.get("bus_id")))
        if old is None:
            continue
        old_links = {lk.get("link"): lk for lk in old.get("links") or []}
        grown: dict[str, int] = {}
        for lk in g.get("links") or []:
            prev = (old_links.get(lk.get("link")) or {}).get("errors") or {}
            for key, v in (lk.get("errors") or {}).items():
                p = prev.get(key)
                if isinstance(v, int) and isinstance(p, int) and v > p and any(c in key for c in _NVLINK_COUNTERS):
                    grown[f"link {lk.get('link')} {key}"] = v - p
        if grown:
            yield fault("gpu.nvlink.errors", view.name, f"GPU{g.get('index')} ({g.get('bus_id')})",
                        "NVLink error counters grew since the previous run of this boot: "
                        + ", ".join(f"{k} +{v}" for k, v in sorted(grown.items())[:8]),
                        severity=Severity.WARN, expected="no growth", actual=grown,
                        evidence=["nvlink.gpus.links.errors", "previous run's nvlink.gpus.links.errors"],
                        hint="replays and recoveries that keep coming point at a link, connector or NVSwitch port")


def nvml_version_mismatch(view: HostView) -> Iterator[Finding]:
    """nvmlInit refused with LIB_RM_VERSION_MISMATCH: the kernel module and the user-space library
    are of different driver versions (an upgrade without a reboot or module reload)."""
    why = view.reasons.get("nvml", "")
    if view.outcomes.get("nvml") in (None, "ok") or "LIB_RM_VERSION_MISMATCH" not in why:
        return
    kernel = ((view.facts.get("host") or {}).get("driver") or {}).get("version")
    yield fault("gpu.nvml.version_mismatch", view.name, "NVIDIA driver",
                "the NVIDIA kernel module" + (f" ({kernel})" if kernel else "") + " and libnvidia-ml are of different "
                "versions: NVML (and CUDA) refuse to start, no GPU can be used or judged",
                expected="one driver version", actual=why[:120], evidence=["nvml outcome reason", "host.driver.version"],
                hint="the driver was upgraded without a reboot: reboot, or unload and reload the nvidia modules")


CHECKS = [nvml_version_mismatch, ecc_uncorrectable, ecc_sram_threshold, reset_required, clocks_slowdown, power_limit_low,
          pcie_replays, nvlink_errors]

FINDING_IDS: tuple[str, ...] = (
    "gpu.nvml.version_mismatch",
    "gpu.ecc.uncorrectable",
    "gpu.ecc.sram_threshold",
    "gpu.reset_required",
    "gpu.clocks.slowdown",
    "gpu.power.limit_low",
    "pcie.replays",
    "gpu.nvlink.errors",
)

_GPUS = Needs(sections=("gpus",), gpus=True)
# What each id's check reads (verdict/coverage.py: without it the id is "not judged", never "passed").
NEEDS: dict[str, Needs] = {
    "gpu.nvml.version_mismatch": Needs(sections=("gpus",)),
    "gpu.ecc.uncorrectable": _GPUS,
    "gpu.ecc.sram_threshold": _GPUS,
    "gpu.reset_required": _GPUS,
    "gpu.clocks.slowdown": _GPUS,
    "gpu.power.limit_low": _GPUS,
    "pcie.replays": _GPUS,
    "gpu.nvlink.errors": Needs(sections=("nvlink",), gpus=True),
}
