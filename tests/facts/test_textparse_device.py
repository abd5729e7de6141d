"""On a machine with a real GPU: run the real commands, parse their output, and compare with NVML
(nvidia-ml-py).  Skipped where nvidia-smi is absent.  Also runnable as a script:
`python3 tests/facts/test_textparse_device.py OUTDIR` saves the raw outputs and a JSON comparison."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from orchestrator.facts.textparse import (
    TextParseError,
    detect_kind,
    facts_from_raw_outputs,
    parse_text,
)
from tests.support.skips import not_here

COMMANDS = {
    "topo_matrix": "nvidia-smi topo -m",
    "topo_p2p": "nvidia-smi topo -p2p r",
    "topo_cpu": "nvidia-smi topo -c 0",
    "nvlink_status": "nvidia-smi nvlink -s",
    "nvlink_caps": "nvidia-smi nvlink -c",
    "smi_list": "nvidia-smi -L",
    "smi_query": "nvidia-smi -q",
    "smi_query_xml": "nvidia-smi -q -x",
    "lspci_tree": "lspci -tvnn",
    "lspci_verbose": "lspci -vvvnn",
}


def run_all(outdir: Path | None = None) -> dict[str, bytes | None]:
    out: dict[str, bytes | None] = {}
    for kind, cmd in COMMANDS.items():
        argv = cmd.split()
        if shutil.which(argv[0]) is None:
            out[kind] = None
            continue
        try:
            r = subprocess.run(argv, capture_output=True, timeout=60)
            out[kind] = r.stdout if r.returncode == 0 else None
        except subprocess.TimeoutExpired:
            out[kind] = None
        if outdir is not None and out[kind] is not None:
            (outdir / f"{kind}.txt").write_bytes(out[kind] or b"")
    return out


def nvml_truth() -> dict[str, Any] | None:
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    pynvml.nvmlInit()
    gpus = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)

        def s(v: Any) -> str:
            return v.decode() if isinstance(v, bytes) else str(v)

        rec: dict[str, Any] = {"index": i, "name": s(pynvml.nvmlDeviceGetName(h)), "uuid": s(pynvml.nvmlDeviceGetUUID(h))}
        rec["bus_id"] = s(pynvml.nvmlDeviceGetPciInfo(h).busId).lower()[-12:]
        rec["gen_current"] = pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h)
        rec["gen_max"] = pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h)
        rec["width_current"] = pynvml.nvmlDeviceGetCurrPcieLinkWidth(h)
        rec["width_max"] = pynvml.nvmlDeviceGetMaxPcieLinkWidth(h)
        rec["vbios"] = s(pynvml.nvmlDeviceGetVbiosVersion(h))
        try:
            rec["mig_current"] = bool(pynvml.nvmlDeviceGetMigMode(h)[0])
        except pynvml.NVMLError:
            rec["mig_current"] = None
        links = []
        for n in range(18):
            try:
                links.append(bool(pynvml.nvmlDeviceGetNvLinkState(h, n)))
            except pynvml.NVMLError:
                break
        rec["nvlink_states"] = links
        gpus.append(rec)
    return {"driver": s(pynvml.nvmlSystemGetDriverVersion()), "gpus": gpus}


def compare(outputs: dict[str, bytes | None]) -> dict[str, Any]:
    report: dict[str, Any] = {"parsed": {}, "mismatches": []}
    for kind, data in outputs.items():
        if data is None:
            report["parsed"][kind] = "no output"
            continue
        text = data.decode("utf-8", "replace")
        try:
            k, obj = parse_text(text, COMMANDS[kind])
            report["parsed"][kind] = {"detected": detect_kind(text), "kind": k, "notes": [str(n) for n in obj.notes]}
            if k != kind and not (kind == "nvlink_caps" and k == "nvlink_status"):
                report["mismatches"].append(f"{kind}: detected as {k}")
        except TextParseError as e:
            report["parsed"][kind] = f"ERROR {e}"
            report["mismatches"].append(f"{kind}: {e}")
    raw = facts_from_raw_outputs({k: outputs.get(k) for k in
                                  ("topo_matrix", "smi_query_xml", "nvlink_status", "lspci_tree", "lspci_verbose")})
    report["raw_mode_errors"] = raw["errors"]
    facts = raw["facts"]
    truth = nvml_truth()
    report["nvml"] = truth
    if truth and "gpus" in facts:
        got = facts["gpus"]
        if got["count"] != len(truth["gpus"]):
            report["mismatches"].append(f"count {got['count']} vs NVML {len(truth['gpus'])}")
        if got["driver_version"] != truth["driver"]:
            report["mismatches"].append(f"driver {got['driver_version']} vs {truth['driver']}")
        for t, g in zip(truth["gpus"], got["list"]):
            for key, mine in (("name", g["name"]), ("uuid", g["uuid"]), ("bus_id", g["bus_id"]),
                              ("vbios", g["vbios"]), ("gen_current", (g["pcie"] or {}).get("gen_current")),
                              ("gen_max", (g["pcie"] or {}).get("gen_max")),
                              ("width_current", (g["pcie"] or {}).get("width_current")),
                              ("width_max", (g["pcie"] or {}).get("width_max")),
                              ("mig_current", (g["mig"] or {}).get("current"))):
                if mine != t[key]:
                    report["mismatches"].append(f"GPU{t['index']} {key}: text {mine!r} vs NVML {t[key]!r}")
        nvl = {x["index"]: x for x in (facts.get("nvlink") or {}).get("gpus", [])}
        for t in truth["gpus"]:
            x = nvl.get(t["index"])
            if x is not None and x["links_up"] is not None and x["links_up"] != sum(t["nvlink_states"]):
                report["mismatches"].append(f"GPU{t['index']} links_up {x['links_up']} vs NVML {sum(t['nvlink_states'])}")
    report["facts_sections"] = sorted(facts)
    return report


def test_real_commands_parse_and_match_nvml(tmp_path: Path) -> None:

    if shutil.which("nvidia-smi") is None:
        not_here("no nvidia-smi (no NVIDIA GPU)")
    report = compare(run_all(tmp_path))
    assert report["mismatches"] == [], report["mismatches"]


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".")
    out.mkdir(parents=True, exist_ok=True)
    rep = compare(run_all(out))
    (out / "report.json").write_text(json.dumps(rep, indent=1, default=str))
    print(json.dumps({"mismatches": rep["mismatches"], "parsed": rep["parsed"], "sections": rep["facts_sections"]},
                     indent=1, default=str)[:6000])
