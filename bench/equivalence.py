#!/usr/bin/env python3
"""Differential equivalence check for speed changes: every normalizer's output, the topology merge
and every host check's findings, for the demo recordings, each simulated machine's pcie data
(root, 256- and 64-byte config space) and seeded random mutations of all of them, computed by
this checkout and by another one (e.g. `git worktree add /tmp/base <commit>`), must be identical.

    python bench/equivalence.py /tmp/base            # prints "identical" or the first differing case

Exceptions count as output (type and message), so a change must also fail the same way on bad
input.  The corpus of simulated pcie data is built once with this checkout's probe and simulator.
"""

from __future__ import annotations

import copy
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from microtime import recorded_data

HERE = Path(__file__).resolve().parent.parent


def build_corpus(dest: Path) -> None:
    sys.path.insert(0, str(HERE))
    from orchestrator.engine.payload import build_script
    from orchestrator.simulate import build_machine, list_machines, load_description

    with tempfile.TemporaryDirectory() as tmp:
        for m in list_machines():
            for cfg in (4096, 256, 64):
                desc = load_description(m)
                desc["config_bytes"] = cfg
                root = build_machine(desc, Path(tmp) / f"{m}-{cfg}")
                script = build_script("pcie", {"root": str(root)}, deadline_s=20)
                r = subprocess.run([sys.executable, "-"], input=script, capture_output=True, timeout=60)
                (dest / f"pcie-{m}-cfg{cfg}.json").write_text(r.stdout.decode())


WEIRD: list[Any] = [None, 0, 1, -1, "", "x", "0x10de", "16", "8.0 GT/s", "Unknown", 3.5, True, [], {}, "0000:18:00.0",
         "0000:18:00.0 ", "NV4", {"unknown": "needs root"}, {"cap": 127, "ctl": 127}, {"cap": "29", "ctl": 4}]


def mutate(obj: Any, rng: random.Random, rate: float) -> Any:
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


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus"
        corpus.mkdir()
        build_corpus(corpus)
        outs: list[dict[str, Any]] = []
        for repo in (HERE, Path(sys.argv[1]).resolve()):
            out = Path(tmp) / f"out-{len(outs)}.json"
            subprocess.run([sys.executable, __file__, "--child", str(repo), str(corpus), str(out)], check=True)
            outs.append(json.loads(out.read_text()))
    mine, theirs = outs
    for case in sorted(set(mine) | set(theirs)):
        if mine.get(case) != theirs.get(case):
            a, b = mine.get(case) or {}, theirs.get(case) or {}
            parts = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
            print(f"DIFFERENT: {case}: {', '.join(parts)}")
            return 1
    print(f"identical: {len(mine)} cases")
    return 0


def child(repo: Path, corpus: Path, dest: Path) -> None:
    sys.path.insert(0, str(repo))
    from orchestrator.facts import normalize
    from orchestrator.verdict import checks
    from orchestrator.verdict.checks.base import HostView
    from orchestrator.verdict.expectations import Expectations

    rec = HERE / "orchestrator" / "demo" / "recordings"
    hosts: list[tuple[str, dict[str, Any]]] = recorded_data(rec)
    for f in sorted(corpus.glob("*.json")):
        env = json.loads(f.read_text())
        hosts.append((f.stem, {"pcie": env["data"]}))
        # with a recording's other probes, so the merge and the cross-section checks see it too
        base = dict(hosts[len(hosts) % 25][1])
        base["pcie"] = env["data"]
        hosts.append((f.stem + "+rec", base))
    EXPECTS = [Expectations(),
               Expectations.from_mapping({"pcie_gen": 5, "pcie_width": 16, "gpu_nic_level": "PIX"}),
               Expectations.from_mapping({"p2p_min_gbps": 200, "gpu_nic_level": "NODE", "gpu_count": 8, "nic_count": 4})]

    def run(name: str, data: dict[str, Any], expect: Expectations) -> dict[str, str]:
        res: dict[str, str] = {}
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
        view = HostView(name=name, facts=facts, outcomes={p: "ok" for p in data}, expect=expect)
        for c in checks.HOST_CHECKS:
            try:
                res["check." + c.__name__] = json.dumps([f.to_dict() for f in c(view)], default=repr)
            except Exception as e:
                res["check." + c.__name__] = f"EXC {type(e).__name__}: {e}"
        return res

    out: dict[str, dict[str, str]] = {}
    rng = random.Random(7)
    for name, data in hosts:
        for k, e in enumerate(EXPECTS):
            out[f"{name}/e{k}"] = run(name, data, e)
        for m in range(3):
            out[f"{name}/t{m}"] = run(name, targeted(data, rng), EXPECTS[m % 3])
        for m, rate in enumerate((0.01, 0.03, 0.1)):
            out[f"{name}/m{m}"] = run(name, mutate(data, rng, rate), EXPECTS[m % 3])
    dest.write_text(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
        sys.exit(0)
    sys.exit(main())
