"""What each NVIDIA Xid code means and what an operator does about it: the one table fleetprobe keeps.

Our own summary of the action buckets of NVIDIA's published Xid catalog ("Analyzing Xid Errors
with the Xid Catalog", docs.nvidia.com/deploy/xid-errors): RESTART_APP -> `application`,
RESET_GPU -> `reset`, RESTART_BM / reboot -> `reboot`, hardware investigation -> `inspect_hardware`,
IGNORE / follow-on events -> `ignore`.  `burst` marks codes whose meaning depends on repetition:
one event is an application's fault, many on one GPU (or across jobs) point at the GPU.

The NVLink5 codes 144-150 carry their severity in the line ("Fatal" / "Nonfatal"), Xid 154 the
recovery action it asks for: `action_of` reads both from the event text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ACTIONS = ("application", "reset", "reboot", "inspect_hardware", "ignore")

# How many events of one burst-sensitive code on one GPU make it "repeated" (a GPU problem to look
# at rather than one job's bug).
BURST_COUNT = 5


@dataclass(frozen=True)
class XidInfo:
    code: int
    meaning: str
    action: str  # one of ACTIONS
    burst: bool = False  # alone: the application; repeated on one GPU: look at the GPU
    note: str = ""


def _x(code: int, meaning: str, action: str, burst: bool = False, note: str = "") -> tuple[int, XidInfo]:
    assert action in ACTIONS, action
    return code, XidInfo(code, meaning, action, burst, note)


XIDS: dict[int, XidInfo] = dict((
    _x(8, "GPU stopped processing (channel idle timeout)", "application", burst=True),
    _x(13, "graphics engine exception (SM warp/global exception)", "application", burst=True,
       note="usually a bug or illegal address in the job; if it follows this GPU across jobs, run diagnostics"),
    _x(31, "GPU memory page fault (an illegal access)", "application", burst=True,
       note="usually the application; repeated on one GPU across jobs points at the GPU or driver"),
    _x(32, "invalid or corrupted push buffer stream", "application", burst=True,
       note="repeated: check the PCIe link (AER, replays) of this GPU"),
    _x(38, "driver firmware error", "reset"),
    _x(43, "GPU stopped processing after an application fault", "application", burst=True),
    _x(44, "graphics engine fault during a context switch", "reset"),
    _x(45, "preemptive cleanup after earlier errors (a follow-on event)", "ignore"),
    _x(46, "GPU stopped processing", "reset"),
    _x(48, "double-bit ECC error (DBE)", "reset", note="a page retirement or row remap follows; reset applies it"),
    _x(57, "error programming the video memory interface", "inspect_hardware"),
    _x(58, "unstable video memory interface", "inspect_hardware"),
    _x(61, "internal micro-controller breakpoint or warning", "reset"),
    _x(62, "internal micro-controller halt", "reset"),
    _x(63, "ECC page retirement or row remap recorded", "reset",
       note="running jobs may continue; the remap takes effect at the next GPU reset"),
    _x(64, "ECC page retirement or row remap failed", "inspect_hardware",
       note="the GPU could not retire the failing memory: an RMA candidate"),
    _x(68, "video decoder (NVDEC) exception", "application", burst=True),
    _x(69, "graphics engine class error", "application", burst=True),
    _x(74, "NVLink error", "reset", note="if it comes back after a reset, inspect the NVLink/NVSwitch hardware"),
    _x(79, "GPU has fallen off the bus", "reboot",
       note="check power, seating, thermals and the slot; repeated falls are a hardware fault"),
    _x(92, "high single-bit ECC error rate", "inspect_hardware"),
    _x(94, "contained ECC error", "application", note="the GPU isolated the error to the job that hit it"),
    _x(95, "uncontained ECC error", "reset"),
    _x(109, "context switch timeout", "application", burst=True),
    _x(110, "security fault", "reset"),
    _x(119, "GSP RPC timeout", "reset", note="repeated: update the driver or reboot"),
    _x(120, "GSP error", "reset"),
    _x(121, "C2C link corrected error", "ignore"),
    _x(137, "NVLink FLA privilege error", "application"),
    _x(140, "unrecovered ECC error", "reset"),
    _x(143, "GPU initialization failure", "reboot"),
    *(_x(c, f"NVLink5 error ({name})", "reset",
         note="the line says Fatal or Nonfatal; nonfatal events are counted, not acted on")
      for c, name in ((144, "SAW"), (145, "RLW"), (146, "TLW"), (147, "TREX"), (148, "NVLPW"),
                      (149, "NETIR"), (150, "MSE"))),
    _x(154, "GPU recovery action changed", "reset", note="the line names the action the driver asks for"),
))

_NVLINK5 = range(144, 151)
_RECOVERY = (("reboot", "reboot"), ("drain and reset", "reset"), ("reset required", "reset"),
             ("drain p2p", "reset"), ("none", "ignore"))
_SEVERITY_WORD = re.compile(r"\b(Nonfatal|Non-fatal|Fatal)\b", re.IGNORECASE)


def lookup(code: int) -> XidInfo | None:
    return XIDS.get(code)


def line_severity(text: str) -> str | None:
    """"fatal" / "nonfatal" where the line says so (NVLink5 Xids, NVSwitch SXids)."""
    m = _SEVERITY_WORD.search(text)
    if not m:
        return None
    return "fatal" if m.group(1).lower() == "fatal" else "nonfatal"


def action_of(code: int, text: str) -> str | None:
    """The action an event asks for; None: a code the table does not know."""
    info = XIDS.get(code)
    if info is None:
        return None
    if code in _NVLINK5 and line_severity(text) == "nonfatal":
        return "ignore"
    if code == 154:
        target = text.lower().rsplit(" to ", 1)[-1]
        for word, action in _RECOVERY:
            if word in target:
                return action
    return info.action
