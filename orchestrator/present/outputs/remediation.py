"""`probe remediate RUN -o fix.yml`: the verdict's remediation plan (verdict/remedy.py) as an Ansible
playbook a person reviews and may run.  fleetprobe never runs it.

One play per action, in escalating order, each over the hosts that need it, with what each host
needs in the play's variables keyed by host (grouped by action and host):

    drain in Slurm      every host the plan takes out of service (scontrol, delegated to
                        `fleetprobe_slurm_controller` when set, the node itself otherwise)
    reset GPUs          `nvidia-smi -r` per GPU, refused (the play fails) where the GPU runs processes
    restart services    systemd units (the fabric manager, persistenced)
    reboot              one host at a time (tagged `reboot`: `--skip-tags reboot` runs the rest)

Hosts that need hands (reseat, inspect, RMA) are drained and listed in the header; configuration
changes are listed there too, never automated.  Everything host-controlled goes into the YAML as
data (safe_dump), into commands as argv items: nothing is ever parsed by a shell.

Nothing a run says is code to Ansible: every string of the run (its id in play names, finding ids
in drain reasons, bus ids, units, messages) is written `!unsafe` (inert.py), so neither
`--syntax-check` nor a run templates it; `hosts:` is an explicit list of names that passed
inventory/targets.py (no pattern, no template, no implicit group or localhost), and a host whose
name did not is left out of every play and named in the header (verdict/remedy.py does not count
it).  Each play's pre_task ends, before anything runs, any host the play was not written for: a
name that the operator's inventory also uses as a group lists that group's hosts, and only the
named host goes on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.inventory.targets import shown
from orchestrator.present.outputs import write_atomic
from orchestrator.present.outputs.inert import Unsafe, dump, inert
from orchestrator.verdict.actions import Action
from orchestrator.verdict.remedy import HostPlan, Plan

_REASON_MAX = 200  # Slurm keeps longer reasons; `sinfo -R` shows the start


def _reason(run_id: str, ids: list[str]) -> str:
    text = f"fleetprobe {run_id}: " + ",".join(ids)
    return text if len(text) <= _REASON_MAX else text[: _REASON_MAX - 8] + " +more"


# Ends every host the play was not written for before any task (a host name that is also a group
# in the operator's inventory would otherwise bring the group's hosts in).
_ONLY_NAMED = {"name": "only the hosts this play names", "ansible.builtin.meta": "end_host",
               "when": "inventory_hostname not in fleetprobe_targets"}


def _play(name: str, hosts: list[str], vars: dict[str, Any], tasks: list[dict[str, Any]], serial: int | None = None,
          tags: list[str] | None = None) -> dict[str, Any]:
    """One play over `hosts` (names inventory/targets.py accepted); `name` and every string of
    `vars` are the run's data, written `!unsafe`."""
    play: dict[str, Any] = {"name": Unsafe(name), "hosts": list(hosts), "gather_facts": False, "become": True}
    if serial is not None:
        play["serial"] = serial
    if tags:
        play["tags"] = tags
    play["vars"] = {"fleetprobe_targets": inert(list(hosts)), **{k: inert(v) for k, v in vars.items()}}
    play["pre_tasks"] = [dict(_ONLY_NAMED)]
    play["tasks"] = tasks
    return play


def _drain(plan: Plan, hosts: list[HostPlan]) -> dict[str, Any]:
    reasons = {h.host: _reason(plan.run_id, h.rules) for h in hosts}
    return _play(f"fleetprobe {plan.run_id}: drain in Slurm", [h.host for h in hosts],
                 {"fleetprobe_drain_reason": reasons}, [{
                     "name": "drain the node (scontrol update ... State=DRAIN)",
                     "ansible.builtin.command": {"argv": [
                         "scontrol", "update", "NodeName={{ fleetprobe_slurm_node | default(inventory_hostname) }}",
                         "State=DRAIN", "Reason={{ fleetprobe_drain_reason[inventory_hostname] }}"]},
                     "delegate_to": "{{ fleetprobe_slurm_controller | default(inventory_hostname) }}",
                 }])


def _reset(plan: Plan, hosts: list[HostPlan]) -> dict[str, Any]:
    gpus = {h.host: h.gpus_to_reset() for h in hosts}
    loop = "{{ fleetprobe_reset_gpus[inventory_hostname] }}"
    return _play(f"fleetprobe {plan.run_id}: reset GPUs where idle", [h.host for h in hosts],
                 {"fleetprobe_reset_gpus": gpus}, [
                     {"name": "list the compute processes of each GPU to reset",
                      "ansible.builtin.command": {"argv": ["nvidia-smi", "--query-compute-apps=pid",
                                                           "--format=csv,noheader", "--id={{ item }}"]},
                      "loop": loop, "register": "fleetprobe_apps", "changed_when": False},
                     {"name": "refuse to reset a GPU that runs processes",
                      "ansible.builtin.fail": {"msg": "GPU {{ item.item }} runs processes ({{ item.stdout_lines | "
                                                      "join(', ') }}): drain the node and let them end first"},
                      "loop": "{{ fleetprobe_apps.results }}",
                      "when": "item.stdout | trim | length > 0"},
                     {"name": "reset the GPU (nvidia-smi -r)",
                      "ansible.builtin.command": {"argv": ["nvidia-smi", "-r", "--id={{ item }}"]},
                      "loop": loop},
                 ])


def _restart(plan: Plan, hosts: list[HostPlan]) -> dict[str, Any]:
    return _play(f"fleetprobe {plan.run_id}: restart services", [h.host for h in hosts],
                 {"fleetprobe_services": {h.host: h.services() for h in hosts}}, [{
                     "name": "restart the service",
                     "ansible.builtin.systemd": {"name": "{{ item }}", "state": "restarted"},
                     "loop": "{{ fleetprobe_services[inventory_hostname] }}",
                 }])


def _reboot(plan: Plan, hosts: list[HostPlan]) -> dict[str, Any]:
    return _play(f"fleetprobe {plan.run_id}: reboot", [h.host for h in hosts], {}, [{
        "name": "reboot the node",
        "ansible.builtin.reboot": {"reboot_timeout": 1800,
                                   "msg": Unsafe(f"fleetprobe {plan.run_id}: reboot to clear a fault")},
    }], serial=1, tags=["reboot"])


def _header(plan: Plan) -> list[str]:
    out = [f"fleetprobe remediation for run {plan.run_id}: {len(plan.hosts)} host(s) with faults that ask for "
           f"something, of {plan.fleet_size}.",
           "Review every play, then run it yourself: ansible-playbook -i INVENTORY THIS_FILE (fleetprobe never runs it).",
           "Afterwards rerun fleetprobe on these hosts; resume each clean node in Slurm "
           "(scontrol update NodeName=... State=RESUME)."]
    if plan.refused:
        out.append(f"Written with --force over the blast-radius guard: {plan.refusal_text()}")
    for left in plan.left_out:
        out.append(f"LEFT OUT, in no play: host {shown(left.host)}: {left.why}; act on it by hand, after finding out "
                   "where its name came from")
    for h in plan.hosts:
        for s in h.steps:
            out.append(f"{h.host}: {s.action.value}: {s.finding.id} on {s.finding.subject}: {s.because}")
    return out


def _comment(text: str) -> str:
    """One comment line: a host-controlled subject with a newline must not start a line of YAML."""
    return "".join(c if c.isprintable() else " " for c in text)


def render_playbook(plan: Plan) -> str:
    """The playbook (YAML) of `plan`; a blocked plan is not rendered (the command refuses)."""
    if plan.blocked:
        raise ValueError(f"the remediation plan is refused: {plan.refusal_text()}")
    disruptive = plan.disruptive()
    rebooted = [h for h in disruptive if h.action is Action.REBOOT]
    # a reboot resets every GPU and restarts every service of its host: nothing else is done there
    rest = [h for h in disruptive if h.action is not Action.REBOOT]
    reset = [h for h in rest if h.gpus_to_reset()]
    restart = [h for h in rest if h.services()]
    plays = []
    if disruptive:
        plays.append(_drain(plan, disruptive))
    if reset:
        plays.append(_reset(plan, reset))
    if restart:
        plays.append(_restart(plan, restart))
    if rebooted:
        plays.append(_reboot(plan, rebooted))
    if not plays:  # an empty playbook is no playbook to Ansible: one play that says so
        plays.append({"name": Unsafe(f"fleetprobe {plan.run_id}: nothing to do on any host"), "hosts": [],
                      "gather_facts": False, "tasks": []})
    header = "".join(f"# {_comment(line)}\n" for line in _header(plan))
    return header + dump(plays)


def write_playbook(plan: Plan, path: Path) -> Path:
    return write_atomic(path, render_playbook(plan))
