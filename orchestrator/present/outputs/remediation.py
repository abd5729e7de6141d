"""`probe remediate RUN -o fix.yml`: the verdict's remediation plan (verdict/remedy.py) as an Ansible
playbook a person reviews and may run.  fleetprobe never runs it.

One play per action, in escalating order, each over the hosts that need it, with what each host
needs in the play's variables keyed by host (grouped by action and host):

    drain in Slurm      every host the plan takes out of service (scontrol, delegated to
                        `fleetprobe_slurm_controller` when set, the node itself otherwise), then
                        WAIT until Slurm reports it drained (idle or down, nothing completing) and
                        squeue lists no job of it: at most `fleetprobe_drain_timeout` seconds
                        (DRAIN_TIMEOUT_S), polled every `fleetprobe_drain_poll`; a node still busy
                        then fails, so no later play touches it (it stays drained)
    reset GPUs          `nvidia-smi -r` per GPU, refused (the play fails) where the GPU runs processes
    restart services    systemd units (the fabric manager, persistenced)
    reboot              one host at a time (tagged `reboot`: `--skip-tags reboot` runs the rest)
    verify and resume   each host acted on: `fleetprobe_verify_command -l HOST` (the run's own
                        `probe run -q -i INV -p PLAYBOOK`, run where ansible-playbook runs) must exit
                        0 and name none of the rules that took the host out; then the node is
                        resumed if its drain reason is still fleetprobe's own

Slurm's convention (the node health check's) is never to overwrite a drain reason someone else set
and to resume only one's own drains: the drain play reads the node's reason first (`scontrol show
node`, when the play runs) and fails the host, untouched, when the reason is someone else's; every
reason fleetprobe writes starts with DRAIN_REASON_PREFIX, and only such a reason is resumed.

Hosts that need hands (reseat, inspect, RMA) are drained (and waited for) and listed in the header; configuration
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
from orchestrator.verdict.remedy import DRAIN_REASON_PREFIX, HostPlan, Plan

_REASON_MAX = 200  # Slurm keeps longer reasons; `sinfo -R` shows the start


def _reason(run_id: str, ids: list[str]) -> str:
    text = f"{DRAIN_REASON_PREFIX}{run_id}: " + ",".join(ids)
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


# Our own templates (never the run's data): the node's Slurm name, the controller scontrol runs on,
# and what `scontrol show node` said of its state and drain reason (Slurm appends `[user@time]`).
_NODE = "{{ fleetprobe_slurm_node | default(inventory_hostname) }}"
_CONTROLLER = "{{ fleetprobe_slurm_controller | default(inventory_hostname) }}"
_OURS = "fleetprobe_node_reason.startswith(fleetprobe_reason_prefix)"
_SLURM_SIDE: dict[str, Any] = {
    "fleetprobe_node_reason": "{{ (fleetprobe_node.stdout | regex_findall('(?m)^ *Reason=(.*)$') + [''])[0] }}",
    "fleetprobe_node_flags": "{{ ((fleetprobe_node.stdout | regex_findall('(?m)^ *State=(\\S+)') + [''])[0])"
                             ".split('+') }}",
}
# Drained: Slurm reports the node drained and idle (or down) with nothing completing; no job of it is
# left in the queue either (the next task asks squeue).
_DRAINED = ("'DRAIN' in fleetprobe_node_flags and fleetprobe_node_flags[0] in ['IDLE', 'DOWN'] "
            "and 'COMPLETING' not in fleetprobe_node_flags")
DRAIN_TIMEOUT_S = 3600  # fleetprobe_drain_timeout: how long the jobs of a drained node may take to end
DRAIN_POLL_S = 30


def _show_node(name: str) -> dict[str, Any]:
    return {"name": name, "ansible.builtin.command": {"argv": ["scontrol", "show", "node", _NODE]},
            "delegate_to": _CONTROLLER, "register": "fleetprobe_node", "changed_when": False}


def _wait_drained() -> dict[str, Any]:
    """Wait, bounded, until Slurm reports the node drained with no job; else fail the host (it stays
    drained, and no later play touches a failed host)."""
    wait = {**_show_node("wait until Slurm reports the node drained, no job left (at most fleetprobe_drain_timeout "
                         "seconds)"),
            "until": _DRAINED, "delay": "{{ fleetprobe_drain_poll | int }}",
            "retries": "{{ [1, (fleetprobe_drain_timeout | int) // (fleetprobe_drain_poll | int)] | max }}"}
    jobs = {"name": "no job of the node left in the queue (squeue -w NODE)",
            "ansible.builtin.command": {"argv": ["squeue", "-h", "-w", _NODE, "-o", "%i"]},
            "delegate_to": _CONTROLLER, "register": "fleetprobe_jobs", "changed_when": False,
            "failed_when": "fleetprobe_jobs.rc != 0 or fleetprobe_jobs.stdout | trim | length > 0"}
    give_up = {"name": "stop here for this node: its jobs did not end in time",
               "ansible.builtin.fail": {"msg": "node " + _NODE + " is not drained after {{ fleetprobe_drain_timeout }} "
                                        "s (jobs still running, or Slurm could not say): nothing is done to it; it "
                                        "stays drained, rerun this playbook once its jobs have ended"}}
    return {"name": "wait for the node's jobs to end", "block": [wait, jobs], "rescue": [give_up]}


def _drain(plan: Plan, hosts: list[HostPlan]) -> dict[str, Any]:
    reasons = {h.host: _reason(plan.run_id, h.rules) for h in hosts}
    play = _play(f"fleetprobe {plan.run_id}: drain in Slurm", [h.host for h in hosts],
                 {"fleetprobe_drain_reason": reasons}, [
                     _show_node("read the node's drain reason (scontrol show node)"),
                     {"name": "skip a node that carries someone else's drain reason (never overwritten)",
                      "ansible.builtin.fail": {"msg": "node " + _NODE + " carries a drain reason that is not "
                                               "fleetprobe's ({{ fleetprobe_node_reason }}): not drained, nothing "
                                               "done to it"},
                      "when": f"fleetprobe_node_reason | length > 0 and not {_OURS}"},
                     {"name": "drain the node (scontrol update ... State=DRAIN)",
                      "ansible.builtin.command": {"argv": [
                          "scontrol", "update", "NodeName=" + _NODE,
                          "State=DRAIN", "Reason={{ fleetprobe_drain_reason[inventory_hostname] }}"]},
                      "delegate_to": _CONTROLLER},
                     _wait_drained(),
                 ])
    play["vars"].update(_slurm_vars())
    return play


def _slurm_vars() -> dict[str, Any]:
    """The stated defaults (-e overrides them) and the readings of `scontrol show node`."""
    return {"fleetprobe_drain_timeout": DRAIN_TIMEOUT_S, "fleetprobe_drain_poll": DRAIN_POLL_S,
            "fleetprobe_reason_prefix": DRAIN_REASON_PREFIX, **_SLURM_SIDE}


def _verify_resume(plan: Plan, hosts: list[HostPlan]) -> dict[str, Any]:
    """Rerun the run's check on each host acted on; resume it only if that check no longer finds the
    rules that took it out and its drain reason is still fleetprobe's own."""
    rules = {h.host: h.rules for h in hosts}
    rerun: dict[str, Any] = {"argv": "{{ fleetprobe_verify_command + ['-l', inventory_hostname] }}"}
    if plan.rerun_in:
        rerun["chdir"] = "{{ fleetprobe_verify_chdir }}"
    verified = "fleetprobe_verify.rc == 0 and fleetprobe_verify_rules[inventory_hostname] | select('in', " \
               "fleetprobe_verify.stdout) | list | length == 0"
    play = _play(f"fleetprobe {plan.run_id}: verify and resume in Slurm", [h.host for h in hosts], {
        "fleetprobe_verify_command": list(plan.rerun), "fleetprobe_verify_rules": rules,
        **({"fleetprobe_verify_chdir": plan.rerun_in} if plan.rerun_in else {})}, [
        {"name": "rerun fleetprobe's check of the host (probe run -q -l HOST, where ansible-playbook runs)",
         "ansible.builtin.command": rerun, "delegate_to": "localhost", "become": False,
         "register": "fleetprobe_verify", "changed_when": False, "failed_when": False},
        {"name": "stop here for this node unless the check passed: it stays drained",
         "ansible.builtin.fail": {"msg": "the check of {{ inventory_hostname }} still fails (exit "
                                  "{{ fleetprobe_verify.rc }}) or names a rule that took it out "
                                  "({{ fleetprobe_verify_rules[inventory_hostname] | join(', ') }}): not resumed"},
         "when": f"not ({verified})"},
        _show_node("read the node's drain reason again (scontrol show node)"),
        {"name": "resume the node (scontrol update ... State=RESUME): only a drain of fleetprobe's own",
         "ansible.builtin.command": {"argv": ["scontrol", "update", "NodeName=" + _NODE, "State=RESUME"]},
         "delegate_to": _CONTROLLER, "when": _OURS},
        {"name": "say why a node is not resumed",
         "ansible.builtin.debug": {"msg": "node " + _NODE + " not resumed: its drain reason is not fleetprobe's "
                                   "({{ fleetprobe_node_reason or 'none' }}): whoever set it resumes it"},
         "when": f"not {_OURS}"},
    ])
    play["vars"].update(_slurm_vars())
    return play


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
           f"Each node is drained, then acted on only once Slurm reports it drained with no job left (at most "
           f"fleetprobe_drain_timeout={DRAIN_TIMEOUT_S} s, -e to change; a node still busy then fails and is left "
           "drained), then checked again (fleetprobe_verify_command -l HOST) and resumed only if that check no "
           "longer names what took it out.",
           "A node that carries someone else's drain reason is never drained, acted on or resumed; only a drain "
           f"reason starting {DRAIN_REASON_PREFIX!r} is fleetprobe's own (read from scontrol show node "
           "when the play runs). Nodes that need hands stay drained for a person."]
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
    acted = [h for h in disruptive if h in rebooted or h in reset or h in restart]
    if acted:  # hosts that need hands stay drained: a person resumes them
        plays.append(_verify_resume(plan, acted))
    if not plays:  # an empty playbook is no playbook to Ansible: one play that says so
        plays.append({"name": Unsafe(f"fleetprobe {plan.run_id}: nothing to do on any host"), "hosts": [],
                      "gather_facts": False, "tasks": []})
    header = "".join(f"# {_comment(line)}\n" for line in _header(plan))
    return header + dump(plays)


def write_playbook(plan: Plan, path: Path) -> Path:
    return write_atomic(path, render_playbook(plan))
