"""The `identity.*` finding rules: one declaration each (verdict/rule.py says what one holds).

docs/findings.md's catalog rows are rendered from these declarations (tests/verdict/test_rules.py).
"""

from __future__ import annotations

from orchestrator.verdict.findings import Action, Finding, Kind
from orchestrator.verdict.rule import Doc, Needs, Rule


def _undecided(f: Finding) -> Action | None:
    """A duplicate identity that cannot say which host lied (its finding is `unknown`) asks for an
    investigation on every host involved, never a drain: only a host shown wrong is acted on."""
    return Action.NONE if f.kind is Kind.UNKNOWN else None

SERIAL_NEEDS_ROOT = Rule(
    "identity.serial.needs_root",
    action=Action.NONE,
    because="serials are root-only: run with become to record them",
    needs=Needs(sections=("host",)),
    host_wide=True,
    doc=Doc(
        severity="info",
        kind="unknown",
        means="system/board serials are readable by root only",
        todo="run with `become: true` to record serials",
    ),
)

HOSTNAME_DUPLICATE = Rule(
    "identity.hostname.duplicate",
    action=Action.CONFIGURE,
    because="two inventory hosts report one hostname",
    needs=Needs(sections=("host",)),
    fleet=True,
    doc=Doc(
        severity="warn",
        kind="fault",
        means="two inventory hosts report the same hostname (fleet check)",
        todo="two entries reach one machine, or it lies about its identity",
    ),
)

SYSTEM_SERIAL_DUPLICATE = Rule(
    "identity.system_serial.duplicate",
    action=Action.NONE,
    because="two hosts report one DMI serial and nothing tells which is its own: investigate, drain neither",
    needs=Needs(sections=("host",)),
    fleet=True,
    doc=Doc(
        severity="warn",
        kind="unknown",
        means="two hosts report the same DMI system serial (fleet check); which one is the real "
        "board cannot be told from one run, so neither is drained for it",
        todo="as above; a forged or cloned identity: read the serial on each machine",
    ),
)

NAME_CLAIMED = Rule(
    "identity.name.claimed",
    action=Action.NONE,
    because="a document spoke for a host it cannot be shown to be: nothing of it is judged, so "
    "there is nothing to do on any host under that name",
    needs=Needs(),
    host_wide=True,
    doc=Doc(
        severity="warn",
        kind="unknown",
        means="a bundle document claims a host name it cannot be shown to own (`probe import`: "
        "another document's file place proves the name is that one's, its own file's "
        "place names another host of the run, or several claim the name and no file's "
        "place decides); the document is kept under a name of its own (`NAME#k`) and "
        "nothing of it is judged; the host it names keeps its name and its own verdict, "
        "and a name nobody can be shown to own is judged for nobody (docs/reliability.md,"
        " Trust boundary)",
        todo="find which machine wrote it (the job's node list, the file's place); probe again "
        "with `srun -o out/%N.json`, one task per node",
    ),
)

UUID_DUPLICATE = Rule(
    "identity.uuid.duplicate",
    action=Action.RESEAT_INSPECT,
    because="one GPU UUID on two GPUs: ask which physical GPU this is",
    needs=Needs(sections=("gpus",), gpus=True),
    fleet=True,
    refine=_undecided,
    doc=Doc(
        severity="fail on a host whose own list holds it twice (shown wrong); warn elsewhere",
        kind="fault; unknown (which host lied cannot be told: action `none`, never drained)",
        means="one GPU UUID on two GPUs in the fleet (fleet check, one finding per host "
        "involved; the message names the host's own places and at most 5 elsewhere, and "
        "counts the rest); a host holding it once, like another host, is not shown to be the one "
        "that lied",
        todo="a forged or virtualised device list; ask which physical GPU you got",
    ),
)

GPU_SERIAL_DUPLICATE = Rule(
    "identity.gpu_serial.duplicate",
    action=Action.RESEAT_INSPECT,
    because="one GPU serial twice in the fleet",
    needs=Needs(sections=("gpus",), gpus=True),
    fleet=True,
    refine=_undecided,
    doc=Doc(severity="fail on a host whose own list holds it twice; warn elsewhere",
            kind="fault; unknown (which host lied cannot be told: action `none`)",
            means="one GPU board serial twice in the fleet", todo="as above"),
)
