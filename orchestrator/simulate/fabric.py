"""A simulated fabric fleet for tests, the demo and the benchmark: hosts with HCAs, GPUs and perftest.

Each host is a directory tree standing in for its filesystem (the probes' `root` argument):

* sysfs: per rail r a PCIe switch under its own root port holding GPU r (0000:r2:00.0) and HCA mlx5_r
  (0000:r3:00.0), with link speeds and widths; /sys/class/infiniband/mlx5_r with port 1's state,
  rate, LID and GID; /sys/module/nvidia_peermem, except on hosts whose GPU memory registers only
  through DMA-BUF (the scenario's `dmabuf_only`: healthy, perftest needs --use_cuda_dmabuf there);
* /usr/bin/ib_write_bw, ib_write_lat, ib_send_bw: links to the fake perftest (fake_perftest.c,
  compiled once), which reads the host's fake-fabric/host.conf (its name, rails, addresses, LIDs,
  line rates) and the shared scenario file;
* the fake libcuda.so.1 / libnccl.so.2 of machines/fabric-node.cuda.yaml (built on demand).

Rails talk over distinct loopback addresses: host i's rail r is 127.(20+r).(i // 200).(i % 200 + 1), so
every pair's bytes cross a real TCP connection between two addresses.  The scenario file slows
hosts, HCAs, pairs and rails by a factor and takes GPUDirect RDMA away from hosts; it is plain
text, one rule a line, read by the fake tools:

    seed 7
    host node05 0.45          # every rail of node05
    hca node07 mlx5_2 0.5     # one HCA of one host
    pair node02 node11 mlx5_1 0.4
    rail mlx5_3 0.5
    nogdr node09              # --use_cuda fails to register GPU memory
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.verdict import rules

HERE = Path(__file__).resolve().parent
PERFTEST_SOURCE = HERE / "fake_perftest.c"
FABRIC_HEADER = HERE / "fake_fabric.h"  # the host.conf and scenario reader both fakes share
PERFTEST_TOOLS = ("ib_write_bw", "ib_write_lat", "ib_send_bw")
MACHINE = "fabric-node"
LINE_GBPS = 400.0
RATE_TEXT = "400 Gb/sec (4X NDR)"


class SimulationError(RuntimeError):
    pass


# ------------------------------------------------------------------------------- scenario


@dataclass
class FabricScenario:
    """Faults planted in a simulated fabric: what a correct qualification must name, and nothing else."""

    seed: int = 1
    hosts: dict[str, float] = field(default_factory=dict)  # host -> factor on every rail
    hcas: dict[tuple[str, str], float] = field(default_factory=dict)  # (host, hca) -> factor
    pairs: dict[tuple[str, str, str], float] = field(default_factory=dict)  # (host, host, hca) -> factor
    rails: dict[str, float] = field(default_factory=dict)  # hca name -> factor everywhere
    nogdr: set[str] = field(default_factory=set)  # hosts whose GPUDirect RDMA does not work
    no_perftest: set[str] = field(default_factory=set)  # hosts without perftest installed
    busy: set[str] = field(default_factory=set)  # hosts whose GPU0 runs a job
    dmabuf_only: set[str] = field(default_factory=set)  # no peer-memory module: GDR through DMA-BUF (healthy)
    forge_id: set[str] = field(default_factory=set)  # hostile: the NCCL id it says as rank 0 is forged

    def text(self) -> str:
        lines = [f"seed {self.seed}"]
        lines += [f"host {h} {f}" for h, f in sorted(self.hosts.items())]
        lines += [f"hca {h} {c} {f}" for (h, c), f in sorted(self.hcas.items())]
        lines += [f"pair {a} {b} {c} {f}" for (a, b, c), f in sorted(self.pairs.items())]
        lines += [f"rail {c} {f}" for c, f in sorted(self.rails.items())]
        lines += [f"nogdr {h}" for h in sorted(self.nogdr)]
        lines += [f"forgeid {h}" for h in sorted(self.forge_id)]
        return "\n".join(lines) + "\n"

    def planted(self) -> dict[str, set[tuple[str, ...]]]:
        """What the findings must name, as (finding id -> the keys its findings carry).  Without
        perftest a slow host is found by bisecting the NCCL rings (fabric.nccl.slow)."""
        out: dict[str, set[tuple[str, ...]]] = {}
        for h in self.hosts:
            out.setdefault(rules.fabric.NCCL_SLOW.id if self.no_perftest else rules.fabric.HOST_SLOW.id, set()).add((h,))
        for h, c in self.hcas:
            out.setdefault(rules.fabric.HCA_SLOW.id, set()).add((h, c))
        for a, b, c in self.pairs:
            out.setdefault(rules.fabric.PATH_SLOW.id, set()).add((min(a, b), max(a, b), c))
        for c in self.rails:
            out.setdefault(rules.fabric.RAIL_SLOW.id, set()).add((c,))
        for h in self.nogdr:
            out.setdefault(rules.fabric.GDR_MISSING.id, set()).add((h,))
        return out


def random_scenario(names: list[str], rails: int, seed: int, kinds: Iterable[str]) -> FabricScenario:
    """A scenario with one fault of each kind asked for (host, hca, pair, rail, nogdr; and dmabuf: a
    healthy host without a peer-memory module), the hosts, HCAs and pairs drawn by `seed` so no two
    faults share a host or a rail."""
    rng = random.Random(f"fabric-scenario:{seed}")
    sc = FabricScenario(seed=seed)
    free = list(names)
    rng.shuffle(free)
    free_rails = [f"mlx5_{r}" for r in range(rails)]
    rng.shuffle(free_rails)
    kinds = list(kinds)
    if "rail" in kinds:  # first, so no other fault shares its rail
        sc.rails[free_rails.pop()] = round(rng.uniform(0.35, 0.6), 2)
    for kind in kinds:
        if kind == "host":
            sc.hosts[free.pop()] = round(rng.uniform(0.3, 0.55), 2)
        elif kind == "hca":
            sc.hcas[(free.pop(), rng.choice(free_rails))] = round(rng.uniform(0.3, 0.6), 2)
        elif kind == "pair":
            a, b = free.pop(), free.pop()
            sc.pairs[(min(a, b), max(a, b), rng.choice(free_rails))] = round(rng.uniform(0.25, 0.6), 2)
        elif kind == "nogdr":
            sc.nogdr.add(free.pop())
        elif kind == "dmabuf":
            sc.dmabuf_only.add(free.pop())
        elif kind == "no_perftest":
            sc.no_perftest = set(names)
        elif kind != "rail":
            raise ValueError(f"unknown fault kind {kind!r}")
    return sc


# ------------------------------------------------------------------------------- building


def build_fake_perftest(dest_dir: Path) -> Path:
    """Compile fake_perftest.c once (cached by its content) into dest_dir; return the binary."""
    src = PERFTEST_SOURCE.read_text() + FABRIC_HEADER.read_text()
    key = hashlib.sha256(src.encode()).hexdigest()[:16]
    out = Path(dest_dir) / f"fake-perftest-{key}" / "perftest"
    if out.is_file():
        return out
    gcc = shutil.which("gcc") or shutil.which("cc")
    if not gcc:
        raise SimulationError("building the fake perftest needs gcc (apt-get install gcc)")
    tmp = out.parent.with_name(out.parent.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    proc = subprocess.run([gcc, "-std=gnu11", "-O1", "-Wall", "-Wextra", "-o", str(tmp / "perftest"),
                           str(PERFTEST_SOURCE), "-lm"], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise SimulationError(f"gcc failed for the fake perftest:\n{proc.stderr[-3000:]}")
    try:
        tmp.rename(out.parent)
    except OSError:  # a concurrent build won the race; its result is identical
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def rail_address(index: int, rail: int) -> str:
    return f"127.{20 + rail}.{index // 200}.{index % 200 + 1}"


@dataclass
class SimHost:
    name: str
    index: int
    root: Path
    addresses: dict[str, str]  # hca -> its rail address
    vars: dict[str, Any] = field(default_factory=dict)  # what the inventory gives this host


def _put(path: Path, value: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{value}\n")


def _pci_device(root: Path, chain: list[str], attrs: dict[str, object]) -> Path:
    """A PCI function at the end of `chain` (bus ids from the root port down) with `attrs`, and
    its /sys/bus/pci/devices link."""
    d = root / "sys/devices/pci0000:00"
    for bdf in chain:
        d = d / bdf
    d.mkdir(parents=True, exist_ok=True)
    for k, v in attrs.items():
        _put(d / k, v)
    link = root / "sys/bus/pci/devices" / chain[-1]
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(os.path.relpath(d, link.parent))
    return d


_LINK = {"current_link_speed": "32.0 GT/s PCIe", "current_link_width": 16, "max_link_speed": "32.0 GT/s PCIe",
         "max_link_width": 16, "numa_node": 0}


def build_host(root: Path, name: str, index: int, rails: int, scenario_path: Path, perftest: Path | None,
               peermem: bool = True, hca_width: dict[int, int] | None = None) -> SimHost:
    """One simulated host's tree under `root`; `hca_width`: rail -> a PCIe width below 16 (downtrained)."""
    root.mkdir(parents=True, exist_ok=True)
    addresses = {}
    conf = [f"host {name}", f"scenario {scenario_path}", "cuda 1", f"peermem {int(peermem)}"]
    for r in range(rails):
        rp, up, down, gpu, hca = (f"0000:00:{r + 1:02x}.0", f"0000:{0x10 * (r + 1):02x}:00.0",
                                  f"0000:{0x10 * (r + 1) + 1:02x}:00.0", f"0000:{0x10 * (r + 1) + 2:02x}:00.0",
                                  f"0000:{0x10 * (r + 1) + 3:02x}:00.0")
        numa = {"numa_node": r * 2 // max(rails, 1)}
        _pci_device(root, [rp], {"vendor": "0x8086", "device": "0x352a", "class": "0x060400", **_LINK, **numa})
        _pci_device(root, [rp, up], {"vendor": "0x1000", "device": "0xc030", "class": "0x060400", **_LINK, **numa})
        _pci_device(root, [rp, up, down], {"vendor": "0x1000", "device": "0xc030", "class": "0x060400", **_LINK, **numa})
        _pci_device(root, [rp, up, down, gpu], {"vendor": "0x10de", "device": "0x2330", "class": "0x030200",
                                                **_LINK, **numa})
        width = (hca_width or {}).get(r, 16)
        hdev = _pci_device(root, [rp, up, down, hca], {"vendor": "0x15b3", "device": "0x1021", "class": "0x020700",
                                                        **_LINK, "current_link_width": width, **numa})
        ib = root / "sys/class/infiniband" / f"mlx5_{r}"
        ib.mkdir(parents=True, exist_ok=True)
        (ib / "device").unlink(missing_ok=True)
        (ib / "device").symlink_to(os.path.relpath(hdev, ib))
        lid = 1 + index * rails + r
        guid = hashlib.sha1(f"{name}:mlx5_{r}".encode()).hexdigest()[:16]
        g4 = ":".join(guid[i:i + 4] for i in range(0, 16, 4))
        _put(ib / "node_guid", g4)
        port = ib / "ports/1"
        for k, v in {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": RATE_TEXT, "link_layer": "InfiniBand",
                     "lid": hex(lid), "sm_lid": "0x1", "gids/0": f"fe80:0000:0000:0000:{g4}"}.items():
            _put(port / k, v)
        addr = rail_address(index, r)
        addresses[f"mlx5_{r}"] = addr
        conf.append(f"rail mlx5_{r} {addr} {lid} {LINE_GBPS}")
    if peermem:
        _put(root / "sys/module/nvidia_peermem/initstate", "live")
    bindir = root / "usr/bin"
    bindir.mkdir(parents=True, exist_ok=True)
    if perftest is not None:
        for tool in PERFTEST_TOOLS:
            link = bindir / tool
            if not link.is_symlink():
                link.symlink_to(perftest)
    _put(root / "fake-fabric/host.conf", "\n".join(conf))
    return SimHost(name, index, root, addresses)


@dataclass
class SimFleet:
    hosts: list[SimHost]
    scenario: FabricScenario
    scenario_path: Path
    libs: dict[str, str] = field(default_factory=dict)  # "cuda", "cuda_busy", "nccl"


def build_fleet(dest: Path, names: list[str], rails: int, scenario: FabricScenario, libs_dir: Path,
                nccl: bool = True) -> SimFleet:
    """Every host's tree under dest/<name>, the scenario written, the fakes compiled (cached in libs_dir)."""
    dest.mkdir(parents=True, exist_ok=True)
    scenario_path = dest / "scenario.conf"
    scenario_path.write_text(scenario.text())
    perftest = build_fake_perftest(libs_dir)
    libs: dict[str, str] = {}
    from orchestrator.simulate.fake_cuda import build_fake_cuda

    libs["cuda"] = str(build_fake_cuda(MACHINE, libs_dir))
    if scenario.busy:
        libs["cuda_busy"] = str(build_fake_cuda(f"{MACHINE}--busy", libs_dir))
    if nccl:
        from orchestrator.simulate.fake_nccl import build_fake_nccl

        libs["nccl"] = str(build_fake_nccl(MACHINE, libs_dir))
    hosts = []
    for i, name in enumerate(names):
        # a planted HCA fault is a card whose PCIe link trained down to x8, as it often is in the field
        widths = {int(hca.split("_")[-1]): 8 for host, hca in scenario.hcas if host == name}
        h = build_host(dest / name, name, i, rails, scenario_path,
                       None if name in scenario.no_perftest else perftest, peermem=name not in scenario.dmabuf_only,
                       hca_width=widths)
        cuda = libs["cuda_busy"] if name in scenario.busy else libs["cuda"]
        fabric_args: dict[str, Any] = {"lib": cuda, "nvml_lib": cuda}
        h.vars = {"probe_root": str(h.root), "probe_fabric_addresses": dict(h.addresses),
                  "probe_args": {"fabric": fabric_args}}
        if nccl:
            # the host's own copy of the library's path: the fake finds the host's conf beside it
            lib = h.root / "usr/lib/libnccl.so.2"
            lib.parent.mkdir(parents=True, exist_ok=True)
            if not lib.is_symlink():
                lib.symlink_to(libs["nccl"])
            h.vars["probe_args"]["nccl"] = {"lib": cuda, "nvml_lib": cuda, "nccl_lib": str(lib)}
        hosts.append(h)
    return SimFleet(hosts, scenario, scenario_path, libs)
