"""GPU health from the counters and states NVML reports (facts gpus, nvlink): ECC, pending page
retirement, clock event reasons, power limits, PCIe replays and NVLink error counters.  Pure.

Counters cumulative since the driver loaded (PCIe replays, NVLink CRC/replay/recovery) are judged
as growth since the previous run of the same boot (`HostView.previous`, boot id of facts kmsg);
absolute values are judged only where any count is a fault (uncorrectable ECC).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from orchestrator.facts import gpu_models
from orchestrator.facts.model import Facts, GpuRecord, GpusFacts
from orchestrator.verdict import rules
from orchestrator.verdict.checks.base import HostView
from orchestrator.verdict.checks.nic import same_boot
from orchestrator.verdict.findings import Finding, Located, Severity, fault, gpu_device, joined
from orchestrator.verdict.rule import Unjudged

# Clock event reasons that mean the hardware is slowing the GPU down (idle, application clocks,
# SW power cap and sync boost are normal operation and not judged).
SLOWDOWN_REASONS = ("hw_slowdown", "hw_thermal", "hw_power_brake")
# The GPU reached the temperature at which the hardware itself halves its clocks (above the
# driver's own thermal management, `sw_thermal`): its cooling failed, and a GPU at half speed
# holds back every job it is in.  HW slowdown or the power brake alone can be the chassis's signal
# under load: a warning.
THERMAL_SLOWDOWN = "hw_thermal"
# A power limit below this share of the board's default is a cap someone set.
POWER_LIMIT_MIN_SHARE = 0.95
# Correctable SRAM errors over the GPU's life at which it is worth a look (fleetprobe's threshold;
# SRAM errors are rarer than DRAM ones and a steady stream of them precedes uncorrectable ones).
SRAM_CORRECTED_WARN = 100


def _gpu_list(section: GpusFacts | None) -> list[GpuRecord]:
    return list((section.get("list") if section else None) or [])


def _gpus(view: HostView) -> list[GpuRecord]:
    return _gpu_list(view.measured("gpus"))


def _subject(g: GpuRecord) -> Located:
    """The GPU as a finding's subject: the text a person reads and the device it is."""
    return Located(f"GPU{g.get('index')} ({g.get('bus_id') or 'bus id unknown'})", (gpu_device(g),))


def _previous_gpus(view: HostView) -> dict[str, GpuRecord]:
    """The previous run's GPUs by bus id, when it read the same boot."""
    if not same_boot(view.facts, view.previous) or not view.previous:
        return {}
    prev = _gpu_list(view.previous.get("gpus"))
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
            yield fault(rules.gpu.ECC_UNCORRECTABLE.id, view.name, _subject(g),
                        f"{vol} uncorrectable ECC error(s) since the driver loaded" + (f" (lifetime: {where})" if where else ""),
                        hint="drain the GPU; check row remapping / page retirement and reset it; repeated: RMA", **kw)
        elif agg:
            yield fault(rules.gpu.ECC_UNCORRECTABLE.id, view.name, _subject(g),
                        f"{agg} uncorrectable ECC error(s) over the GPU's life, none since the driver loaded"
                        + (f" ({where})" if where else ""), severity=Severity.WARN,
                        hint="a past uncorrectable error: check that its memory was remapped/retired", **kw)


def ecc_sram_threshold(view: HostView) -> Iterator[Finding]:
    for g in _gpus(view):
        sram = ((g.get("ecc") or {}).get("locations") or {}).get("sram")
        n = _count(sram, "aggregate_corrected")
        if n is not None and n >= SRAM_CORRECTED_WARN:
            yield fault(rules.gpu.ECC_SRAM_THRESHOLD.id, view.name, _subject(g),
                        f"{n} correctable SRAM ECC errors over the GPU's life (at least {SRAM_CORRECTED_WARN} is a warning)",
                        severity=Severity.WARN, expected=f"< {SRAM_CORRECTED_WARN}", actual=n,
                        evidence=["gpus.list.ecc.locations.sram.aggregate_corrected"],
                        hint="SRAM errors precede uncorrectable ones: watch the rate, run diagnostics (dcgmi diag -r 3)")


def _ecc_modes(g: GpuRecord) -> tuple[bool | None, bool | None]:
    """(current, pending) ECC mode as the GPU reports it; None where it reports none (no ECC) or
    where the board ships with ECC off (a GeForce card: off is its own setting)."""
    model = gpu_models.lookup(g.get("name"), g.get("pci_device_id"))
    ecc = g.get("ecc") if model is None or not model.ecc_off_by_default else None
    modes = [ecc.get(k) if isinstance(ecc, dict) else None for k in ("mode_current", "mode_pending")]
    current, pending = (m if isinstance(m, bool) else None for m in modes)
    return current, pending


def ecc_disabled(view: HostView) -> Iterator[Finding]:
    for g in _gpus(view):
        current, pending = _ecc_modes(g)
        if current is None or (current and pending is not False):
            continue
        if not current:
            message = "ECC is off" + (": on again at the next GPU reset" if pending else "")
        else:
            message = "ECC is on, set to go off at the next GPU reset"
        yield fault(rules.gpu.ECC_DISABLED.id, view.name, _subject(g),
                    message + "; memory errors are neither corrected nor counted while it is off",
                    severity=Severity.WARN, expected={"current": True, "pending": True},
                    actual={"current": current, "pending": pending},
                    evidence=["gpus.list.ecc.mode_current", "gpus.list.ecc.mode_pending"],
                    hint=f"nvidia-smi -i {g.get('index')} -e 1, then reset the GPU; find who turned it off")


# NVML's GPU recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, R570+): what the driver asks for.
_RECOVERY: dict[str, tuple[Severity, str, str]] = {
    "GPU_RESET": (Severity.FAIL, "the driver asks for a GPU reset", "drain the GPU and reset it (nvidia-smi -r)"),
    "BUS_RESET": (Severity.FAIL, "the driver asks for a GPU bus reset", "drain the GPU and reset it (nvidia-smi -r)"),
    "NODE_REBOOT": (Severity.FAIL, "the driver asks for a node reboot (a reset is not enough)", "drain and reboot the node"),
    "SYSTEM_REBOOT": (Severity.FAIL, "the driver asks for a system reboot (a reset is not enough)",
                      "drain and reboot the node"),
    "RECOVER_IMEX_DOMAIN": (Severity.FAIL, "the driver asks for the recovery of the GPU's IMEX domain",
                            "drain the IMEX domain's nodes and restart its IMEX daemons (nvidia-imex)"),
    # nvml probe 1.4 and older named value 5 (RECOVER_IMEX_DOMAIN in nvml.h) this way
    "GPU_RESET_BUS": (Severity.FAIL, "the driver asks for the recovery of the GPU's IMEX domain (value 5)",
                      "drain the IMEX domain's nodes and restart its IMEX daemons (nvidia-imex)"),
    "DRAIN_AND_RESET": (Severity.WARN, "the GPU runs at reduced capacity: the driver asks to drain and reset it",
                        "stop scheduling new work on the GPU, let running jobs finish, then reset it"),
    "DRAIN_P2P": (Severity.WARN, "the driver asks to drain peer-to-peer traffic before it can say more",
                  "stop P2P/NVLink traffic and read the recovery action again (nvidia-smi -q)"),
}


def reset_required(view: HostView) -> Iterator[Finding]:
    for g in _gpus(view):
        action = g.get("recovery_action")
        if isinstance(action, str) and action in _RECOVERY:
            sev, what, hint = _RECOVERY[action]
            yield fault(rules.gpu.RESET_REQUIRED.id, view.name, _subject(g), f"NVML recovery action {action}: {what}",
                        severity=sev, expected="NONE", actual=action, evidence=["gpus.list.recovery_action"],
                        hint=hint)
            continue
        answered = sorted(k for k, v in (g.get("unknown") or {}).items() if v == "RESET_REQUIRED")
        if answered:
            yield fault(rules.gpu.RESET_REQUIRED.id, view.name, _subject(g),
                        f"NVML answers RESET_REQUIRED for {', '.join(answered[:6])}: the GPU must be reset "
                        "before it can be used", expected="answers", actual={k: "RESET_REQUIRED" for k in answered},
                        evidence=[f"gpus.list.unknown.{k}" for k in answered[:6]],
                        hint="drain the GPU and reset it (nvidia-smi -r), or reboot; dmesg for the Xid that preceded it")
            continue
        if isinstance(action, str) and action != "NONE":
            # a value newer than this table (later nvml.h releases add actions), or one no driver
            # writes: neither is a pass
            yield fault(rules.gpu.RESET_REQUIRED.id, view.name, _subject(g),
                        f"the GPU's recovery action reads {action!r}, which this fleetprobe does not know, "
                        "so the GPU may need a reset or a reboot", severity=Severity.WARN, expected="NONE", actual=action,
                        evidence=["gpus.list.recovery_action"],
                        hint="read the GPU's recovery action in nvidia-smi -q and NVIDIA's NVML reference")
            continue
        if g.get("retired_pages_pending") is True:
            yield fault(rules.gpu.RESET_REQUIRED.id, view.name, _subject(g),
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
            yield fault(rules.gpu.CLOCKS_SLOWDOWN.id, view.name, _subject(g),
                        f"the hardware is slowing the GPU's clocks ({', '.join(hw)})"
                        + (f" at {temp} °C" if temp is not None else ""),
                        severity=Severity.FAIL if THERMAL_SLOWDOWN in hw else Severity.WARN,
                        expected="no HW slowdown", actual=names,
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
            yield fault(rules.gpu.POWER_LIMIT_LOW.id, view.name, _subject(g),
                        f"power limit {have:g} W, the board's default is {default:g} W", severity=Severity.WARN,
                        expected=default, actual=have,
                        evidence=["gpus.list.power_limits.limit_w", "gpus.list.power_limits.default_limit_w"],
                        hint="someone capped the GPU (nvidia-smi -pl) or the platform enforces a lower limit; "
                             "restore the default limit if you paid for it")


# Violation-time policies judged (nvmlPerfPolicyType_t): thermal limits and the board's reliability
# and board-limit policies.  The power policy (SW power cap) is normal operation under load.
VIOLATION_POLICIES = ("thermal", "reliability", "board_limit")
# The share of wall time a policy may hold the clocks down before it is a warning (fleetprobe's
# threshold: a GPU throttled 1 % of the time loses ~1 % of its work, well beyond run-to-run noise).
VIOLATION_SHARE_WARN = 0.01


def _boot_us(view: HostView) -> float | None:
    kmsg = view.facts.get("kmsg")
    bt = kmsg.get("boot_time") if kmsg else None
    return bt * 1e6 if isinstance(bt, (int, float)) and not isinstance(bt, bool) and bt > 0 else None


def clocks_violation(view: HostView) -> Iterator[Finding]:
    """Cumulative violation time as a share of wall time: between runs of the same boot (a rate),
    else since the boot (the driver loads at boot; kmsg's boot time)."""
    prev = _previous_gpus(view)
    boot = _boot_us(view)
    for g in _gpus(view):
        v = g.get("violation_ns")
        now_us = _count(v, "reference_us")
        if not isinstance(v, dict) or now_us is None:
            continue
        prev_g = prev.get(str(g.get("bus_id")))
        old = prev_g.get("violation_ns") if prev_g else None
        then_us = _count(old, "reference_us")
        if then_us is not None and now_us > then_us:
            window_ns, base, since = (now_us - then_us) * 1000.0, old, "since the previous run of this boot"
        elif boot is not None and now_us > boot:
            window_ns, base, since = (now_us - boot) * 1000.0, {}, "since the boot"
        else:
            continue
        shares = {}
        for policy in VIOLATION_POLICIES:
            cur, was = _count(v, policy), _count(base, policy) if base else 0
            if cur is not None and was is not None and cur >= was:
                shares[policy] = (cur - was) / window_ns
        over = {p: round(x, 4) for p, x in shares.items() if x >= VIOLATION_SHARE_WARN}
        if over:
            yield fault(rules.gpu.CLOCKS_VIOLATION.id, view.name, _subject(g),
                        "clocks held down " + ", ".join(f"{p} {x:.1%} of the time" for p, x in over.items())
                        + f" {since}", severity=Severity.WARN, expected=f"< {VIOLATION_SHARE_WARN:.0%}", actual=over,
                        evidence=["gpus.list.violation_ns", "kmsg.boot_time" if not base else
                                  "previous run's gpus.list.violation_ns"],
                        hint="a GPU that keeps hitting its thermal/board limits is slower than its peers: check "
                             "cooling and power delivery; `nvidia-smi -q -d PERFORMANCE`")


# A GPU this close to its slowdown threshold throttles at the next load step (fleetprobe's threshold).
THERMAL_MARGIN_WARN_C = 5


def thermal_margin(view: HostView) -> Iterator[Finding]:
    for g in _gpus(view):
        margin, src = thermal_margin_of(g)
        if margin is not None and margin <= THERMAL_MARGIN_WARN_C:
            th = g.get("thermal") or {}
            yield fault(rules.gpu.THERMAL_MARGIN_LOW.id, view.name, _subject(g),
                        f"{margin} °C from the slowdown threshold"
                        + (f" ({shown_temp(g.get('temperature_c'))} now, slowdown at {th.get('slowdown_c')} °C)"
                           if th.get("slowdown_c") is not None else ""),
                        severity=Severity.WARN, expected=f"> {THERMAL_MARGIN_WARN_C} °C", actual=margin,
                        evidence=[src], hint="the GPU is about to throttle: check inlet temperature, airflow, fans "
                                             "and the heatsink")


def shown_temp(t: Any) -> str:
    return f"{t} °C" if isinstance(t, (int, float)) else "?"


def thermal_margin_of(g: GpuRecord) -> tuple[int | None, str]:
    """(margin in °C, evidence): NVML's margin, else the slowdown threshold minus the temperature."""
    th = g.get("thermal")
    if not isinstance(th, dict):
        return None, ""
    m = _count(th, "margin_c")
    if m is not None:
        return m, "gpus.list.thermal.margin_c"
    slow, temp = _count(th, "slowdown_c"), g.get("temperature_c")
    if slow is not None and isinstance(temp, (int, float)) and not isinstance(temp, bool):
        return int(slow - temp), "gpus.list.thermal.slowdown_c, gpus.list.temperature_c"
    return None, ""


def persistence_disabled(view: HostView) -> Iterator[Finding]:
    off = [g for g in _gpus(view) if g.get("persistence_mode") is False]
    if off:
        yield fault(rules.gpu.PERSISTENCE_DISABLED.id, view.name, joined(_subject(g) for g in off),
                    f"persistence mode is off on {len(off)} GPU(s): the driver tears the GPU state down whenever "
                    "no process holds it, so every job pays the initialisation and errors between jobs go unseen",
                    severity=Severity.WARN, expected=True, actual=False, evidence=["gpus.list.persistence_mode"],
                    hint="run nvidia-persistenced (or nvidia-smi -pm 1) at boot")


def pcie_replays(view: HostView) -> Iterator[Finding]:
    prev = _previous_gpus(view)
    for g in _gpus(view):
        before = prev.get(str(g.get("bus_id")))
        now, then = _count(g, "pcie_replays"), _count(before, "pcie_replays")
        if now is not None and then is not None and now > then:
            yield fault(rules.pcie.REPLAYS.id, view.name, _subject(g),
                        f"the GPU's PCIe link replayed {now - then} time(s) since the previous run of this boot",
                        severity=Severity.WARN, expected="no growth", actual={"previous": then, "now": now},
                        evidence=["gpus.list.pcie_replays", "previous run's gpus.list.pcie_replays"],
                        hint="a link that keeps replaying is marginal: check the riser/slot and the AER counters "
                             "along the GPU's upstream chain")


_NVLINK_COUNTERS = ("replay", "recovery", "crc_flit", "crc_data")


def nvlink_errors(view: HostView) -> Iterator[Finding]:
    if view.measured("nvlink") is None or not same_boot(view.facts, view.previous):
        return
    prev_nvlink = view.previous.get("nvlink") if view.previous else None
    before = {str(g.get("bus_id")): g for g in (prev_nvlink.get("gpus") if prev_nvlink else None) or []}
    nvlink = view.facts.get("nvlink")
    for g in (nvlink.get("gpus") if nvlink else None) or []:
        old = before.get(str(g.get("bus_id")))
        if old is None:
            continue
        old_links = {lk.get("link"): lk for lk in old.get("links") or []}
        grown: dict[str, int] = {}
        for lk in g.get("links") or []:
            old_link = old_links.get(lk.get("link"))
            prev = (old_link.get("errors") if old_link else None) or {}
            for key, v in (lk.get("errors") or {}).items():
                p = prev.get(key)
                if isinstance(v, int) and isinstance(p, int) and v > p and any(c in key for c in _NVLINK_COUNTERS):
                    grown[f"link {lk.get('link')} {key}"] = v - p
        if grown:
            yield fault(rules.gpu.NVLINK_ERRORS.id, view.name,
                        Located(f"GPU{g.get('index')} ({g.get('bus_id')})", (gpu_device(g),)),
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
    host = view.facts.get("host")
    driver = host.get("driver") if host else None
    kernel = driver.get("version") if driver else None
    yield fault(rules.gpu.NVML_VERSION_MISMATCH.id, view.name, "NVIDIA driver",
                "the NVIDIA kernel module" + (f" ({kernel})" if kernel else "") + " and libnvidia-ml are of different "
                "versions: NVML (and CUDA) refuse to start, no GPU can be used or judged",
                expected="one driver version", actual=why[:120], evidence=["nvml outcome reason", rules.host.DRIVER_VERSION.id],
                hint="the driver was upgraded without a reboot: reboot, or unload and reload the nvidia modules")


CHECKS = [nvml_version_mismatch, ecc_uncorrectable, ecc_disabled, ecc_sram_threshold, reset_required, clocks_slowdown, power_limit_low,
          pcie_replays, nvlink_errors, clocks_violation, thermal_margin, persistence_disabled]

FINDING_IDS: tuple[str, ...] = (
    rules.gpu.NVML_VERSION_MISMATCH.id,
    rules.gpu.ECC_UNCORRECTABLE.id,
    rules.gpu.ECC_DISABLED.id,
    rules.gpu.ECC_SRAM_THRESHOLD.id,
    rules.gpu.RESET_REQUIRED.id,
    rules.gpu.CLOCKS_SLOWDOWN.id,
    rules.gpu.POWER_LIMIT_LOW.id,
    rules.pcie.REPLAYS.id,
    rules.gpu.NVLINK_ERRORS.id,
    rules.gpu.CLOCKS_VIOLATION.id,
    rules.gpu.THERMAL_MARGIN_LOW.id,
    rules.gpu.PERSISTENCE_DISABLED.id,
)


def _any_gpu(facts: Facts, has: Callable[[GpuRecord], bool]) -> bool:
    return any(has(g) for g in _gpu_list(facts.get("gpus")) if isinstance(g, dict))


def _unjudged(facts: Facts) -> dict[str, str]:
    """The ids whose readings no GPU of the host gave (an older probe or driver, a consumer card)."""
    out = {}
    kmsg = facts.get("kmsg")
    if not _any_gpu(facts, lambda g: isinstance(g.get("recovery_action"), str)
                    or isinstance(g.get("retired_pages_pending"), bool)
                    or "RESET_REQUIRED" in (g.get("unknown") or {}).values()):
        out[rules.gpu.RESET_REQUIRED.id] = ("neither the GPU recovery action (driver R570+) nor the page retirement "
                                     "status (before Ampere) was readable")
    if not _any_gpu(facts, lambda g: _count(g.get("violation_ns"), "reference_us") is not None):
        out[rules.gpu.CLOCKS_VIOLATION.id] = "no violation-time counters read (nvml probe 1.2+)"
    elif not isinstance(kmsg.get("boot_time") if kmsg else None, (int, float)):
        out[rules.gpu.CLOCKS_VIOLATION.id] = "the boot time is unknown (kmsg probe), so the counters have no time base"
    if not _any_gpu(facts, lambda g: thermal_margin_of(g)[0] is not None):
        out[rules.gpu.THERMAL_MARGIN_LOW.id] = "neither the thermal margin nor the slowdown threshold was readable"
    if not _any_gpu(facts, lambda g: isinstance(g.get("persistence_mode"), bool)):
        out[rules.gpu.PERSISTENCE_DISABLED.id] = "persistence mode not readable"
    if not _any_gpu(facts, lambda g: _ecc_modes(g)[0] is not None):
        out[rules.gpu.ECC_DISABLED.id] = ("no GPU reports an ECC mode (GPUs without ECC, boards that ship with it off, "
                                           "or NVML refused the reading)")
    return out



# The rules whose judgement the facts may hold back (their declaration says `held_back`):
# _unjudged shares its steps with the checks, so the check and its coverage cannot disagree.
HELD_BACK: dict[str, Unjudged] = {fid: _unjudged for fid in (rules.gpu.RESET_REQUIRED.id, rules.gpu.CLOCKS_VIOLATION.id, rules.gpu.THERMAL_MARGIN_LOW.id,
                                                              rules.gpu.PERSISTENCE_DISABLED.id, rules.gpu.ECC_DISABLED.id)}
