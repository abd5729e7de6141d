"""Record the bundled demo fleet: run the real probes against the simulated machines.

    python -m orchestrator.simulate.record            # rewrite orchestrator/demo/recordings + inventory

For every demo host (simulate/demo_fleet.yml) this builds the machine's sysfs/proc tree and host
files, compiles its fake libnvidia-ml.so.1 and libcuda.so.1, runs each probe exactly as the
controller ships it (`python3 -` on stdin), and stores the envelopes.  The demo replays them, so a
fresh machine without GPUs, gcc or SSH shows real probe output; a test re-records a sample and
compares, so recordings cannot drift from the probes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import Any

import yaml

from orchestrator.engine import payload as probes
from orchestrator.simulate.hostfiles import build_host_files, build_kernel_log
from orchestrator.simulate.sysfs import build_machine, build_nic_state

HERE = Path(__file__).resolve().parent
DEMO_FLEET = HERE / "demo_fleet.yml"
DEMO_DIR = HERE.parent / "demo"
RECORDINGS = DEMO_DIR / "recordings"
PLACEHOLDER = "/simulated"

# Inventory groups of the demo and what each group is supposed to be (probe_expect).
GROUPS: list[tuple[str, str, dict[str, Any]]] = [
    ("dgx_h100", "dgx-h100-", {"gpu_count": 8, "gpu_model": "H100", "nvlink_all_up": True, "nvswitch_count": 4,
                               "gpu_nic_level": "PIX", "pcie_gen": 5, "pcie_width": 16, "mig": False,
                               "nic_ports_up": True}),
    ("lenovo_h100", "lenovo-h100-", {"gpu_count": 8, "gpu_model": "H100", "nvlink_all_up": True, "gpu_nic_level": "PIX"}),
    ("dgx_a100", "dgx-a100-", {"gpu_count": 8, "gpu_model": "A100", "nvlink_all_up": True, "gpu_nic_level": "PXB",
                               "pcie_gen": 4, "mig": False}),
    ("dgx1_v100", "dgx1-v100-", {"gpu_count": 8, "gpu_model": "V100", "nvlink_links_per_gpu": 6, "driver_min": "470"}),
    ("rtx4090", "rtx4090-", {"gpu_count": 8, "gpu_model": "4090"}),
    ("workstations", "ws-a6000-", {"gpu_count": 4, "gpu_model": "A6000", "nic_count": 1}),
    ("cloud_vms", "vm-", {"gpu_count": 2}),
    # Grace: the GPUs sit on NVLink-C2C, no NIC shares a PCIe bridge with them; the placement rule
    # of the fleet still applies and is judged by the NIC on the GPU's own CPU.
    ("grace_gb200", "gb200-", {"gpu_count": 4, "gpu_model": "GB200", "nvlink_all_up": True, "gpu_nic_level": "PXB"}),
    # A B300 board with 7 visible GPUs: judged against 7, not the 8 of the usual HGX.
    ("b300", "b300-", {"gpu_count": 7, "gpu_model": "B300", "nvlink_all_up": True, "gpu_nic_level": "PIX"}),
    # rented machines: prove the provider patched (NVIDIA's security bulletins, facts/security.py)
    ("rented", "rent-", {"gpu_count": 8, "gpu_model": "H100", "security_floor": True}),
]


def demo_hosts() -> dict[str, str]:
    return dict(yaml.safe_load(DEMO_FLEET.read_text()))


def _run_probe(name: str, args: dict[str, Any], timeout: float = 120.0,
               env: dict[str, str] | None = None) -> dict[str, Any]:
    script = probes.build_script(name, args, timeout - 5)
    res = subprocess.run([sys.executable, "-"], input=script, capture_output=True, timeout=timeout, env=env)
    return json.loads(res.stdout)


# What the recorder passes to the nccl probe against the fake libnccl: messages up to the size the
# floors hold from (facts/gpu_models.py NCCL_FLOOR_MIN_BYTES), few iterations (the fake really
# reduces every byte; its figures come from the fixture, not from the repetitions).
NCCL_FAKE_ARGS: dict[str, Any] = {"min_bytes": 1 << 20, "max_bytes": 256 << 20, "step_factor": 4, "iters": 2,
                                  "warmup_iters": 1, "budget_s": 60, "hang_s": 10}


# Seconds each probe gets when recorded (default 120).  The NVML probes answer in well under a
# second; their shorter deadline keeps a wedged-driver machine's recording short (the watch gives
# up a hung call after a quarter of the deadline: probes/_prelude.py).
PROBE_TIMEOUTS: dict[str, float] = {"nvml": 20.0, "nvlink": 20.0}


def _nccl_env(host: str, machine: str) -> dict[str, str]:
    """The recording's environment: none of the recorder's own NCCL settings, the machine's
    (host_env of its fixture), and stand-ins for the log's host name and process ids."""
    from orchestrator.simulate.fake_nccl import host_env

    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    env.update(host_env(machine), FAKE_NCCL_HOST=host, FAKE_NCCL_PID="4242")
    return env


def _scrub(doc: Any, work: str) -> Any:
    """Temporary paths would make every recording differ; replace them with one placeholder."""
    return json.loads(json.dumps(doc).replace(work, PLACEHOLDER))


def record_host(host: str, machine: str, work: Path, libs: Path,
                only: Collection[str] | None = None) -> dict[str, dict[str, Any]]:
    """Every probe's envelope on the simulated machine; `only`: just these probes (the benchmark
    of bench/precision.py records what the audit playbook runs)."""
    root = work / host / "root"
    build_machine(machine, root)
    build_host_files(machine, root, host)
    build_kernel_log(machine, root, host)
    build_nic_state(machine, root, host)
    runs: dict[str, dict[str, Any]] = {name: {"root": str(root)} for name in ("host", "pcie", "kmsg", "nic")}
    if only is None or {"nvml", "nvlink"} & set(only):  # compiled only where an NVML probe runs
        from orchestrator.simulate.fake_nvml import build_fake_nvml

        nvml = build_fake_nvml(machine, libs, seed=host)
        runs.update(nvml={"lib": str(nvml)}, nvlink={"lib": str(nvml)})
    if only is None or {"p2p", "nccl"} & set(only):  # no CUDA probe asked: no libcuda to build
        runs.update(_cuda_runs(machine, libs))
    return {name: _scrub(_run_probe(name, args, timeout=PROBE_TIMEOUTS.get(name, 120.0),
                                    env=_nccl_env(host, machine) if name == "nccl" else None), str(work))
            for name, args in runs.items() if only is None or name in only}


def _cuda_runs(machine: str, libs: Path) -> dict[str, dict[str, Any]]:
    """The p2p and nccl probes' arguments against the machine's fake libcuda / libnccl (none
    where the machine has no CUDA description)."""
    runs: dict[str, dict[str, Any]] = {}
    try:
        from orchestrator.simulate.fake_cuda import build_fake_cuda, machines

        names = set(machines())
        if machine in names or machine.split("--")[0] in names:
            cuda = build_fake_cuda(machine, libs)
            # The fake's figures come from the fixture, not the buffer size: small buffers keep it quick.
            runs["p2p"] = {"lib": str(cuda), "nvml_lib": str(cuda), "size_mb": 2, "repeats": 1, "loops": 2,
                           "latency_loops": 4, "load_s": 0.05}
            from orchestrator.simulate.fake_nccl import build_fake_nccl, has_nccl

            if has_nccl(machine):
                runs["nccl"] = dict(NCCL_FAKE_ARGS, lib=str(cuda), nvml_lib=str(cuda),
                                    nccl_lib=str(build_fake_nccl(machine, libs)))
    except ImportError:
        pass
    return runs


def write_inventory(hosts: dict[str, str], path: Path) -> None:
    groups: dict[str, Any] = {}
    for group, prefix, expect in GROUPS:
        members = {h: {"probe_replay": h} for h in hosts if h.startswith(prefix)}
        if members:
            groups[group] = {"hosts": members, "vars": {"probe_expect": expect}}
    doc = {"all": {
        "vars": {"ansible_connection": "replay"},
        "children": {
            "demo": {"children": groups},
            "live": {"hosts": {
                "this-machine": {"ansible_connection": "local"},
                "offline-01": {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 1},
            }},
        },
    }}
    header = ("# The bundled demo fleet (generated by `python -m orchestrator.simulate.record`).\n"
              "# demo: simulated machines replayed from recordings of the real probes run against fixture\n"
              "# hardware (sysfs trees, compiled fake libnvidia-ml / libcuda).  live: this machine, probed for\n"
              "# real, and a host whose port is closed, to show how an unreachable host is reported.\n")
    path.write_text(header + yaml.safe_dump(doc, sort_keys=False, width=120))


# What differs between two recordings of the same machine by the same probe: how long it took (the
# envelope's, the probe's and the p2p load's seconds), the clock NVML's violation counters were read
# against, and the content hash in the fake libraries' build folder (it follows the fakes' sources).
_TIMINGS = re.compile(r'"(duration_s|elapsed_s|seconds|reference_us)": [0-9.eE+-]+')
_BUILD_HASH = re.compile(r"(/_libs/fake-[A-Za-z0-9_.-]+?)-[0-9a-f]{16}/")


def same_recording(old: str, new: str) -> bool:
    """Whether two recordings say the same thing but for their timings and build folders."""
    def bare(text: str) -> str:
        return _BUILD_HASH.sub(r"\1/", _TIMINGS.sub(r'"\1": 0', text))
    return bare(old) == bare(new)


def _keep_or_write(path: Path, env: dict[str, Any]) -> None:
    """Write the envelope, unless the recording there says the same: re-recording the demo keeps
    every recording the probes and machines did not change, so its goldens (and the durations the
    hosts table shows) move only where a host now answers differently."""
    text = json.dumps(env, sort_keys=True) + "\n"
    if path.is_file() and same_recording(path.read_text(), text):
        return
    path.write_text(text)


def record(hosts: dict[str, str], out: Path, keep_work: bool = False) -> None:
    work = Path(tempfile.mkdtemp(prefix="fleetprobe-demo-"))
    libs = work / "_libs"
    try:
        for host, machine in hosts.items():
            envelopes = record_host(host, machine, work, libs)
            hdir = out / host
            hdir.mkdir(parents=True, exist_ok=True)
            for old in hdir.glob("*.json"):  # the fabric steps (fabric/) are record_fabric.py's
                if old.stem not in envelopes:
                    old.unlink()
            for name, env in envelopes.items():
                env["duration_s"] = round(env.get("duration_s", 0.0), 3)
                _keep_or_write(hdir / f"{name}.json", env)
            statuses = ", ".join(f"{n}={e['status']}" for n, e in envelopes.items())
            print(f"recorded {host} ({machine}): {statuses}")
    finally:
        if not keep_work:
            shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description="Record the bundled demo fleet from the simulated machines.")
    ap.add_argument("--out", default=str(RECORDINGS))
    ap.add_argument("--host", action="append", help="record only these demo hosts")
    a = ap.parse_args()
    hosts = demo_hosts()
    if a.host:
        hosts = {h: hosts[h] for h in a.host}
    record(hosts, Path(a.out))
    if not a.host:
        write_inventory(demo_hosts(), DEMO_DIR / "inventory.yml")
    return 0


if __name__ == "__main__":
    sys.exit(main())
