"""A simulated fabric fleet behind the test sshd, and how its findings are read back.

`fabric_run(...)` builds N hosts x R rails (orchestrator/simulate/fabric.py: sysfs trees, fake
perftest, fake libcuda/libnccl), an inventory whose hosts are the real sshd on 127.0.0.x, a playbook
with the play's `fabric:` spec, and runs the real `probe run` on it.  `finding_keys` turns the
fleet's fabric findings into the keys `FabricScenario.planted()` names, so a test compares the two.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.simulate.fabric import FabricScenario, SimFleet, build_fleet
from tests.support.fleet import Cli
from tests.support.sshd import SshdServer

# Small and quick: the fakes' figures come from the scenario, not from how many bytes move.
# A round's window is a deadline, not a wait (a round that is done hands its time on): 8 s leaves
# a host of 16 on two loaded cores room to start its round late without failing a measurement.
FAST: dict[str, Any] = {"round_s": 8, "iters": 5, "size": 8192, "nccl": False}
FAST_NCCL: dict[str, Any] = {"min_bytes": 1 << 18, "max_bytes": 1 << 18, "iters": 1, "timeout_s": 40,
                             "floor_min_bytes": 1 << 18}


def require(reason: str | None) -> None:
    """Skip for a missing real part; under CI=true a missing real part is a failure."""
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (CI=true: the real part must be there)")
        pytest.skip(reason)


def names(n: int) -> list[str]:
    return [f"node{i + 1:02d}" for i in range(n)]


def playbook(spec: dict[str, Any], probes: list[str] | None = None) -> str:
    play: dict[str, Any] = {"name": "fabric qualification", "hosts": "all", "fabric": spec}
    if probes:
        play["probes"] = probes
    return yaml.safe_dump([play], sort_keys=False)


@dataclass
class FabricSetup:
    fleet: SimFleet
    inventory: Path
    playbook: Path
    cli: Cli


def fabric_setup(tmp: Path, server: SshdServer, libs: Path, n: int, rails: int, scenario: FabricScenario,
                 spec: dict[str, Any], nccl: bool = False, probes: list[str] | None = None) -> FabricSetup:
    fleet = build_fleet(tmp / "hosts", names(n), rails, scenario, libs, nccl=nccl)
    hosts = server.fleet(n)
    for h, sim in zip(hosts, fleet.hosts):
        h.vars.update(sim.vars)
    inventory = tmp / "inventory.yml"
    inventory.write_text(server.inventory_yaml(hosts))
    book = tmp / "fabric.yml"
    book.write_text(playbook(spec, probes))
    return FabricSetup(fleet, inventory, book, Cli.create(tmp))


def fabric_run(setup: FabricSetup, timeout: float = 600) -> tuple[int, str, dict[str, Any]]:
    proc = setup.cli.run("run", "-i", str(setup.inventory), "-p", str(setup.playbook), "--format", "json",
                         timeout=timeout)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"probe run printed no fleet document (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
                             ) from None
    return proc.returncode, proc.stderr, doc


_HCA = re.compile(r"^(\S+) \(rail \d+")
_PATH = re.compile(r"^(\S+) <-> ([^:\s]+):(\S+) \(rail \d+\)$")
_RAIL = re.compile(r"^rail \d+ \((\S+)\)$")


def finding_keys(doc: dict[str, Any]) -> dict[str, set[tuple[str, ...]]]:
    """fabric.* findings -> the keys FabricScenario.planted() uses: host; (host, hca); (a, b, hca);
    (hca,) for a rail (which must then be raised on every host)."""
    out: dict[str, set[tuple[str, ...]]] = {}
    for f in doc["findings"]:
        fid, host, subject = f["id"], f["host"], f["subject"]
        if not fid.startswith("fabric."):
            continue
        key: tuple[str, ...]
        if fid == "fabric.hca.slow":
            m = _HCA.match(subject)
            key = (host, m.group(1) if m else subject)
        elif fid == "fabric.path.slow":
            m = _PATH.match(subject)
            assert m, subject
            key = (min(host, m.group(2)), max(host, m.group(2)), m.group(1))
        elif fid == "fabric.rail.slow":
            m = _RAIL.match(subject)
            key = (m.group(1) if m else subject,)
        else:
            key = (host,)
        out.setdefault(fid, set()).add(key)
    return out


def rail_hosts(doc: dict[str, Any], hca: str) -> set[str]:
    return {f["host"] for f in doc["findings"] if f["id"] == "fabric.rail.slow" and f"({hca})" in f["subject"]}


def plan_of(doc: dict[str, Any]) -> dict[str, Any]:
    """The plan a host that took part recorded (rounds, extra rounds)."""
    for rec in doc["hosts"]:
        plan = ((rec.get("facts") or {}).get("fabric") or {}).get("plan")
        if plan:
            return dict(plan)
    raise AssertionError("no host recorded a fabric plan")


HUNG_TOOL = "#!/usr/bin/env python3\n# a perftest that hangs (a dead HCA's driver call): it never connects nor listens\nimport time\ntime.sleep(600)\n"


def hang_tool(root: Path, tool: str = "ib_write_bw") -> None:
    """Replace a simulated host's perftest tool by one that hangs until it is killed."""
    path = root / "usr/bin" / tool
    path.unlink()
    path.write_text(HUNG_TOOL)
    path.chmod(0o755)


SLOW_TOOL = """#!/usr/bin/env python3
# a perftest slow to start (CUDA initialising, a loaded host): it waits, then runs the real one
import os, sys, time
time.sleep(%r)
real = os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), "..", "sbin", os.path.basename(sys.argv[0]))
os.execv(real, [real] + sys.argv[1:])
"""


def slow_tool(root: Path, delay_s: float, tool: str = "ib_write_bw") -> None:
    """Make a simulated host's perftest tool start `delay_s` late on every run.  The fake is moved
    to usr/sbin, as deep as usr/bin, where it still finds the host's fake-fabric/host.conf."""
    path = root / "usr/bin" / tool
    moved = root / "usr/sbin" / tool
    moved.parent.mkdir(parents=True, exist_ok=True)
    moved.symlink_to(os.readlink(path))
    path.unlink()
    path.write_text(SLOW_TOOL % delay_s)
    path.chmod(0o755)


# ------------------------------------------------------------------------------ synthetic facts


def synthetic_facts(hosts: list[str], rails: int, factor: Any = None, rounds: int | None = None,
                    line: float = 400.0, gdr_broken: tuple[str, ...] = ()) -> dict[str, Any]:
    """host -> facts["fabric"] as the normalizer writes them, for a full round robin (or its first
    `rounds` rounds): `factor(a, b, rail)` scales each pair's bandwidth and latency (1.0: healthy)."""
    from orchestrator.engine.fabric_plan import tournament

    factor = factor or (lambda a, b, rail: 1.0)
    facts: dict[str, Any] = {}
    for h in hosts:
        facts[h] = {
            "source": "probe", "skipped": None, "gpus": [], "perftest": {"tools": {}, "cuda": True, "missing": []},
            "hcas": [{"hca": f"mlx5_{r}", "port": 1, "rail": r, "state": "ACTIVE", "link_layer": "InfiniBand",
                      "rate": "400 Gb/sec (4X NDR)", "rate_gbps": line, "width": 4, "lid": hex(1 + r), "port_guid": None,
                      "node_guid": None, "bus_id": f"0000:{0x13 + 0x10 * r:02x}:00.0",
                      "pcie": {"speed": "32.0 GT/s PCIe", "width": 16, "max_speed": "32.0 GT/s PCIe", "max_width": 16},
                      "numa_node": 0, "nearest_gpu": None, "address": None} for r in range(rails)],
            "gdr": {"expected": True, "why": "nvidia_peermem is loaded", "nvidia_peermem": True, "nv_peer_mem": False,
                    "dmabuf": None},
            "measurements": [], "nccl": [], "errors": [],
            "plan": {"hosts": len(hosts), "rails": rails, "rounds": 0, "extra_rounds": 0, "round_s": 30.0,
                     "budget_s": 1800.0, "tests": ["ib_write_bw", "ib_write_lat"], "spec": {}},
        }
    for k, pairs in enumerate(tournament(hosts, rounds, "synthetic")):
        for a, b in pairs:
            for r in range(rails):
                f = factor(a, b, r)
                for test, kind, value in (("ib_write_bw", "bw", line * 0.965 * f), ("ib_write_lat", "lat", 1.9 / f ** 0.5)):
                    for me, peer, role in ((a, b, "client"), (b, a, "server")):
                        facts[me]["measurements"].append({
                            "round": k, "rail": r, "hca": f"mlx5_{r}", "peer": peer, "peer_hca": f"mlx5_{r}", "role": role,
                            "test": test, "kind": kind, "extra": False, "value": round(value, 3),
                            "p99_us": round(value * 1.09, 3) if kind == "lat" else None, "size": 65536 if kind == "bw" else 2,
                            "use_cuda": 0 if kind == "bw" else None,
                            "gdr_error": "Couldn't allocate MR" if kind == "bw" and me in gdr_broken else None,
                            "error": None, "error_kind": None})
        for h in hosts:
            facts[h]["plan"]["rounds"] = k + 1
    return facts


LYING_TOOL = """#!/usr/bin/env python3
# a perftest whose client prints FIGURE Gb/s for every run, whatever the real one measured (a hostile
# or broken host); its server end prints what was measured
import os, re, subprocess, sys
real = os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), "..", "sbin", os.path.basename(sys.argv[0]))
proc = subprocess.run([real] + sys.argv[1:], stdout=subprocess.PIPE, text=True)
out = proc.stdout
if "--" in sys.argv:  # the client: the server's address comes after "--" (probes/fabric.py)
    out = re.sub(r"^( \\d+\\s+\\d+\\s+)\\S+(\\s+)\\S+", lambda m: m.group(1) + "FIGURE" + m.group(2) + "FIGURE",
                 out, flags=re.M)
sys.stdout.write(out)
sys.exit(proc.returncode)
"""


def lying_tool(root: Path, gbps: float, tool: str = "ib_write_bw") -> None:
    """Make a simulated host's perftest client print `gbps` for every run (the server end of the
    same transfer, on the peer, prints what was measured)."""
    path = root / "usr/bin" / tool
    moved = root / "usr/sbin" / tool
    moved.parent.mkdir(parents=True, exist_ok=True)
    moved.symlink_to(os.readlink(path))
    path.unlink()
    path.write_text(LYING_TOOL.replace("FIGURE", f"{gbps:.2f}"))
    path.chmod(0o755)
