"""The normalizer corpus shared by the golden/differential tests and bench/equivalence.py.

* the demo recordings' envelope data per host;
* the simulated PCIe corpus: every machine of orchestrator/simulate built at config-space sizes
  4096 / 256 / 64 and read by the real pcie probe;
* the differential cases: each host judged under three expectations, with seeded targeted faults
  and seeded random mutations, through every normalizer, the topology merge and every host check.

orchestrator is imported inside the functions, never at module level: bench/equivalence.py imports
this module first and then puts another checkout's orchestrator first on sys.path.
"""

from __future__ import annotations

import atexit
import copy
import functools
import json
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RECORDINGS = REPO / "orchestrator" / "demo" / "recordings"
CONFIG_SIZES = (4096, 256, 64)

Case = dict[str, str]  # output name (probe, "topology", "errors", "check.<fn>") -> JSON text or "EXC ..."


def recorded_data(recordings: Path = RECORDINGS) -> list[tuple[str, dict[str, Any]]]:
    """(host, probe -> data of its ok envelopes) for every demo recording, in name order."""
    hosts = []
    for d in sorted(recordings.iterdir()):
        data = {}
        for f in sorted(d.glob("*.json")):
            env = json.loads(f.read_text())
            if env.get("status") == "ok":
                data[env["probe"]] = env["data"]
        hosts.append((d.name, data))
    return hosts


def build_corpus(dest: Path, workers: int = 4) -> None:
    """pcie-<machine>-cfg<size>.json: the pcie probe's envelope on each simulated machine."""
    from orchestrator.engine.payload import build_script
    from orchestrator.simulate import build_machine, list_machines, load_description

    def one(machine: str, cfg: int) -> None:
        desc = load_description(machine)
        desc["config_bytes"] = cfg
        root = build_machine(desc, dest / "roots" / f"{machine}-{cfg}")
        script = build_script("pcie", {"root": str(root)}, deadline_s=20)
        r = subprocess.run([sys.executable, "-"], input=script, capture_output=True, timeout=60, check=True)
        (dest / f"pcie-{machine}-cfg{cfg}.json").write_text(r.stdout.decode())

    jobs = [(m, cfg) for m in list_machines() for cfg in CONFIG_SIZES]
    with ThreadPoolExecutor(workers) as pool:  # each job is a probe subprocess
        list(pool.map(lambda job: one(*job), jobs))


def corpus_data(corpus: Path) -> list[tuple[str, dict[str, Any]]]:
    """(pcie-<machine>-cfg<size>, the probe's data) in name order."""
    return [(f.stem, json.loads(f.read_text())["data"]) for f in sorted(corpus.glob("pcie-*.json"))]


def differential_hosts(recorded: list[tuple[str, dict[str, Any]]],
                       corpus: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """The recordings, then each corpus machine alone and with a recording's other probes (so the
    merge and the cross-section checks see it too)."""
    hosts = list(recorded)
    for name, pcie in corpus:
        hosts.append((name, {"pcie": pcie}))
        base = dict(hosts[len(hosts) % len(recorded)][1])
        base["pcie"] = pcie
        hosts.append((name + "+rec", base))
    return hosts


WEIRD: list[Any] = [None, 0, 1, -1, "", "x", "0x10de", "16", "8.0 GT/s", "Unknown", 3.5, True, [], {}, "0000:18:00.0",
                    "0000:18:00.0 ", "NV4", {"unknown": "needs root"}, {"cap": 127, "ctl": 127}, {"cap": "29", "ctl": 4}]


def mutate(obj: Any, rng: random.Random, rate: float) -> Any:
    """A copy of `obj` with keys dropped or replaced by WEIRD values, list items dropped,
    duplicated or shuffled, strings cut or upper-cased, ints bit-flipped, at `rate`."""
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            r = rng.random()
            if r < rate * 0.3:
                continue
            if r < rate:
                out[k] = rng.choice(WEIRD)
            else:
                out[k] = mutate(v, rng, rate)
        return out
    if isinstance(obj, list):
        items = [mutate(v, rng, rate) for v in obj if rng.random() > rate * 0.5]
        if items and rng.random() < rate:
            items.append(copy.deepcopy(rng.choice(items)))
        if rng.random() < rate * 0.3:
            rng.shuffle(items)
        return items
    if isinstance(obj, str) and rng.random() < rate:
        return obj.upper() if rng.random() < 0.5 else obj[:-1]
    if isinstance(obj, int) and not isinstance(obj, bool) and rng.random() < rate:
        return obj ^ rng.choice([1, 2, 4, 8, 16, 127])
    return obj


def targeted(data: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """Plausible faults: ACS redirect bits, downtrained links, port types lost, links down."""
    data = copy.deepcopy(data)
    for dev in (data.get("pcie") or {}).get("devices") or []:
        cfg = dev.get("config") or {}
        if isinstance(cfg.get("acs"), dict) and "cap" in cfg["acs"] and rng.random() < 0.3:
            cfg["acs"]["ctl"] = rng.choice([0x1c, 0x04, 0x7f, 0x01])
        if dev.get("current_link_width") and rng.random() < 0.1:
            dev["current_link_width"] = rng.choice(["8", "4", "1"])
        if dev.get("current_link_speed") and rng.random() < 0.1:
            dev["current_link_speed"] = rng.choice(["2.5 GT/s PCIe", "8.0 GT/s PCIe", "16 GT/s"])
        if isinstance(cfg.get("pcie"), dict) and rng.random() < 0.05:
            cfg["pcie"] = {"unknown": "needs root"}
        if rng.random() < 0.05:
            dev["driver"] = "vfio-pci"
        if rng.random() < 0.03:
            dev["numa_node"] = rng.choice(["-1", "1", None])
    for g in (data.get("nvlink") or {}).get("gpus") or []:
        for lk in g.get("links") or []:
            if rng.random() < 0.1:
                lk["state"] = "down"
            if rng.random() < 0.05:
                lk["remote_bus_id"] = None
    p2p = data.get("p2p") or {}
    for p in p2p.get("pairs") or []:
        if rng.random() < 0.1 and isinstance(p.get("ce_gbps"), (int, float)):
            p["ce_gbps"] = p["ce_gbps"] * rng.choice([0.1, 0.5, 0.65])
        if rng.random() < 0.05:
            p["peer_enabled"] = False
            p["peer_error"] = rng.choice([None, "CUDA_ERROR_TOO_MANY_PEERS", "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"])
    return data


EXPECT_MAPPINGS: list[dict[str, Any]] = [
    {},
    {"pcie_gen": 5, "pcie_width": 16, "gpu_nic_level": "PIX"},
    {"p2p_min_gbps": 200, "gpu_nic_level": "NODE", "gpu_count": 8, "nic_count": 4},
]


def run_case(name: str, data: dict[str, Any], expect_index: int) -> Case:
    """Every normalizer's output, the topology merge, the errors and each host check's findings;
    an exception counts as output (type and message), so a change must also fail the same way."""
    from orchestrator.facts import normalize
    from orchestrator.verdict import checks
    from orchestrator.verdict.checks.base import HostView
    from orchestrator.verdict.expectations import Expectations

    res: Case = {}
    for probe, d in data.items():
        entry = normalize.NORMALIZERS.get(probe)
        if not entry:
            continue
        try:
            res[probe] = json.dumps(entry[1](d), default=repr)
        except Exception as e:
            res[probe] = f"EXC {type(e).__name__}: {e}"
    try:
        facts, errors = normalize.normalize_host(data)
    except Exception as e:
        res["host"] = f"EXC {type(e).__name__}: {e}"
        return res
    res["topology"] = json.dumps(facts.get("topology"), default=repr)
    res["errors"] = json.dumps(errors)
    expect = Expectations.from_mapping(EXPECT_MAPPINGS[expect_index]) if expect_index else Expectations()
    view = HostView(name=name, facts=facts, outcomes={p: "ok" for p in data}, expect=expect)
    for c in checks.HOST_CHECKS:
        try:
            res["check." + c.__name__] = json.dumps([f.to_dict() for f in c(view)], default=repr)
        except Exception as e:
            res["check." + c.__name__] = f"EXC {type(e).__name__}: {e}"
    return res


def differential_cases(hosts: list[tuple[str, dict[str, Any]]]) -> Iterator[tuple[str, Case]]:
    """(case name, outputs) for each host: three expectations, three targeted faults, three
    mutation rates; one seeded generator across all, so the cases are the same on every run."""
    rng = random.Random(7)
    n = len(EXPECT_MAPPINGS)
    for name, data in hosts:
        for k in range(n):
            yield f"{name}/e{k}", run_case(name, data, k)
        for m in range(3):
            yield f"{name}/t{m}", run_case(name, targeted(data, rng), m % n)
        for m, rate in enumerate((0.01, 0.03, 0.1)):
            yield f"{name}/m{m}", run_case(name, mutate(data, rng, rate), m % n)


@functools.cache
def session_corpus() -> list[tuple[str, dict[str, Any]]]:
    """The simulated PCIe corpus, built once per test session (about ten seconds of probe runs)."""
    dest = Path(tempfile.mkdtemp(prefix="fleetprobe-pcie-corpus-"))
    atexit.register(shutil.rmtree, dest, True)
    build_corpus(dest)
    return corpus_data(dest)
