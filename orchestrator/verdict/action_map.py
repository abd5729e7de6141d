"""fleetprobe's action classes in the vocabularies operators already use.

A finding's `action` (verdict/actions.py) is one of seven classes.  The tools around a GPU fleet
speak their own: NVML's GPU recovery action, NVIDIA's Xid catalog's resolution buckets, gpud's
repair actions, NVSentinel's `recommendedAction` and NVIDIA Health Validation's escalation chain.
`ACTION_MAP` gives, for every class and every vocabulary, the name that vocabulary uses for it, or
None with the reason it has none (a vocabulary without a step for a setting to change), so a
workflow that reads fleetprobe's JSON can hand the finding on in its own terms.
tests/verdict/test_action_map.py fails on a class without a row or a row without every vocabulary.

Which names were confirmed (October 2026, against the sources named in `VOCABULARIES`):
* NVML: NONE, GPU_RESET, NODE_REBOOT, DRAIN_P2P, DRAIN_AND_RESET (nvmlGpuRecoveryAction_t as the
  cuda-python bindings document it; newer drivers add RECOVER_IMEX_DOMAIN, BUS_RESET, SYSTEM_REBOOT).
* NVSentinel: NONE, COMPONENT_RESET, CONTACT_SUPPORT, RUN_FIELDDIAG, RESTART_VM, RESTART_BM,
  REPLACE_VM (the RecommendedAction enum of its platform-connector protos).
* gpud: IGNORE_NO_ACTION_REQUIRED, REBOOT_SYSTEM, HARDWARE_INSPECTION (api/v1 RepairActionType);
  CHECK_USER_APP_AND_GPU from its release notes ("add check user app and GPU action type"), the
  string itself not seen.
* Xid catalog: RESTART_APP and CONTACT_SUPPORT seen as immediate/investigatory actions of catalog
  entries; RESET_GPU, RESTART_BM, CHECK_MECHANICALS, UPDATE_SW and IGNORE not confirmed here
  (taken from the catalog's resolution column as the issue names them).
* Health Validation: drain, reset_gpu and service_required seen in its Xid checks' recommended
  action ("drain: reset_gpu -> service_required"); restart_os not confirmed (the chain's
  "restart OS" step, named as the issue names it).

Pure data.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.verdict.findings import Action


@dataclass(frozen=True)
class Vocabulary:
    key: str  # the key in ACTION_MAP's rows (and docs/findings.md's table)
    name: str
    source: str  # where its names are defined


@dataclass(frozen=True)
class Mapped:
    """One class in one vocabulary: its name there, or None and why it has none."""

    name: str | None
    note: str = ""


VOCABULARIES: tuple[Vocabulary, ...] = (
    Vocabulary("nvml", "NVML GPU recovery action (nvmlDeviceGetGpuRecoveryAction)",
               "https://docs.nvidia.com/deploy/nvml-api/ (nvmlGpuRecoveryAction_t)"),
    Vocabulary("xid", "NVIDIA Xid catalog resolution", "https://docs.nvidia.com/deploy/xid-errors/"),
    Vocabulary("gpud", "gpud repair action", "https://github.com/leptonai/gpud (api/v1 RepairActionType)"),
    Vocabulary("nvsentinel", "NVSentinel recommendedAction",
               "https://github.com/NVIDIA/NVSentinel (data-models protos RecommendedAction)"),
    Vocabulary("health_validation", "NVIDIA Health Validation escalation (drain -> reset GPU -> restart OS -> service)",
               "https://docs.nvidia.com/health-validation/operating/remediation.md"),
)

_NO_SETTING = "no step for a setting to change: a person changes it (drain first where jobs must not run)"

ACTION_MAP: dict[Action, dict[str, Mapped]] = {
    Action.NONE: {
        "nvml": Mapped("NONE"), "xid": Mapped("IGNORE"), "gpud": Mapped("IGNORE_NO_ACTION_REQUIRED"),
        "nvsentinel": Mapped("NONE"), "health_validation": Mapped(None, "no step: the node stays in rotation"),
    },
    Action.CONFIGURE: {
        "nvml": Mapped("NONE", "NVML asks nothing of the GPU itself"), "xid": Mapped("UPDATE_SW"),
        "gpud": Mapped("CHECK_USER_APP_AND_GPU", "its nearest: the software around the GPU"),
        "nvsentinel": Mapped(None, _NO_SETTING), "health_validation": Mapped(None, _NO_SETTING),
    },
    Action.RESET_GPU: {
        "nvml": Mapped("GPU_RESET", "DRAIN_AND_RESET where NVML asks to drain P2P first"),
        "xid": Mapped("RESET_GPU"),
        "gpud": Mapped("REBOOT_SYSTEM", "gpud resets a GPU by rebooting the system"),
        "nvsentinel": Mapped("COMPONENT_RESET"), "health_validation": Mapped("reset_gpu", "after drain"),
    },
    Action.RESTART_SERVICE: {
        "nvml": Mapped("DRAIN_P2P", "the fabric manager's restart stops P2P traffic first; persistenced: NONE"),
        "xid": Mapped(None, "the catalog has no service step (an NVSwitch/fabric Xid says RESET_GPU or RESTART_BM)"),
        "gpud": Mapped("REBOOT_SYSTEM", "its nearest: gpud has no service restart"),
        "nvsentinel": Mapped("COMPONENT_RESET", "its nearest: the component below the service"),
        "health_validation": Mapped("restart_os", "its nearest step: a service restart is less"),
    },
    Action.REBOOT: {
        "nvml": Mapped("NODE_REBOOT"), "xid": Mapped("RESTART_BM", "REBOOT in older catalogs"),
        "gpud": Mapped("REBOOT_SYSTEM"), "nvsentinel": Mapped("RESTART_BM", "RESTART_VM on a virtual machine"),
        "health_validation": Mapped("restart_os"),
    },
    Action.RESEAT_INSPECT: {
        "nvml": Mapped(None, "NVML has no hardware step: its action reads NONE or NODE_REBOOT"),
        "xid": Mapped("CHECK_MECHANICALS"), "gpud": Mapped("HARDWARE_INSPECTION"),
        "nvsentinel": Mapped("RUN_FIELDDIAG"), "health_validation": Mapped("service_required"),
    },
    Action.RMA: {
        "nvml": Mapped(None, "NVML has no hardware step: its action reads NONE or NODE_REBOOT"),
        "xid": Mapped("CONTACT_SUPPORT"), "gpud": Mapped("HARDWARE_INSPECTION"),
        "nvsentinel": Mapped("CONTACT_SUPPORT", "REPLACE_VM on a virtual machine"),
        "health_validation": Mapped("service_required"),
    },
}


def mapped(action: Action) -> dict[str, str | None]:
    """The class's name in each vocabulary (None: it has none), by vocabulary key."""
    return {k: m.name for k, m in ACTION_MAP[action].items()}
