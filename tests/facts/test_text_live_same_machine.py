"""Where the live probe and a text import describe the same machine, their facts are the same
(issue 30): the kernel-log and NIC sections.

Kernel log: published `dmesg` outputs are written as the /dev/kmsg records they were printed from
(the same seconds since boot and messages) and read by the real `kmsg` probe; the text importer
reads the published file itself, and the raw-record form of it.  Two published raw /dev/kmsg
captures are read by both as they are.

NIC: simulated machines' sysfs (orchestrator/simulate) is read by the real `nic` probe and printed
as `ibstat` and `ibstatus` print it (their layout as in the published captures of
tests/fixtures/evidence); both imports must give the probe's devices, except what text cannot
show (PCI function, counters, board id, net interfaces), which the text facts name as unknown.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.engine.payload import build_script
from orchestrator.facts.normalize import normalize_host
from orchestrator.facts.textparse import import_texts, read_path
from orchestrator.simulate import build_machine, textout
from orchestrator.simulate.hostfiles import build_kernel_log
from orchestrator.simulate.sysfs import build_nic_state
from tests.facts.test_textparse_common import FIXTURES
from tests.support.evidence import evidence

_STAMP = re.compile(r"^\[\s*(\d+\.\d+)\] (.*)$")
# What an event is, whichever side read it; `when` is what the text printed (absent live).
EVENT_KEYS = ("kind", "t", "bus_id", "code", "text", "severity", "link", "port", "key")


def _probe(name: str, root: Path) -> dict[str, Any]:
    res = subprocess.run([sys.executable, "-"], input=build_script(name, {"root": str(root)}, deadline_s=20),
                         capture_output=True, timeout=60, check=True)
    env = json.loads(res.stdout)
    assert env["status"] == "ok", env
    return normalize_host({name: env["data"]})[0][name]


def _events(section: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: e.get(k) for k in EVENT_KEYS} for e in section["events"]]


def _live_kmsg(tmp_path: Path, records: str) -> dict[str, Any]:
    root = tmp_path / "root"
    build_kernel_log("dgx-h100", root, "h")  # boot id and btime; the log is replaced below
    (root / "dev" / "kmsg").chmod(0o644)
    (root / "dev" / "kmsg").write_text(records)
    return _probe("kmsg", root)


def _records(lines: list[tuple[float, str]]) -> str:
    """The /dev/kmsg records of (seconds since boot, message) lines: what dmesg printed them from."""
    return "".join(f"6,{seq},{round(t * 1e6)},-;{msg}\n" for seq, (t, msg) in enumerate(lines))


DMESG = [evidence("dmesg_aer_multiple_corrected_id_rpi64_01.txt"),
         evidence("dmesg_sxid_22013_data_severity_nvtrust124_01.txt"),
         FIXTURES / "health_dmesg_xid13_burst_vllm5901.txt"]


@pytest.mark.parametrize("path", DMESG, ids=[p.name for p in DMESG])
def test_a_published_dmesg_gives_the_probes_events(tmp_path: Path, path: Path) -> None:
    text = read_path(path)
    lines = []
    for row in text.splitlines():
        m = _STAMP.match(row)
        assert m, row  # every line of these captures carries its stamp
        lines.append((float(m.group(1)), m.group(2)))
    live = _live_kmsg(tmp_path, _records(lines))
    assert live["events"], "the capture holds events"
    for name, body in ((path.name, text), ("records.txt", _records(lines))):
        imported = import_texts([(name, body)]).facts["kmsg"]
        assert _events(imported) == _events(live), name
        assert imported["lines_scanned"] == live["lines_scanned"]


RAW = ["kmsg_raw_peermem_gpud_01.txt", "kmsg_raw_nvswitch_open_no_event_gpud_01.txt"]


@pytest.mark.parametrize("name", RAW)
def test_a_published_raw_kmsg_capture_reads_the_same_both_ways(tmp_path: Path, name: str) -> None:
    text = read_path(evidence(name))
    live = _live_kmsg(tmp_path, text)
    imported = import_texts([(name, text)]).facts["kmsg"]
    assert _events(imported) == _events(live)
    assert imported["lines_scanned"] == live["lines_scanned"] > 0


def test_the_simulated_fault_logs_read_the_same_both_ways(tmp_path: Path) -> None:
    for machine in ("dgx-h100--xid79", "dgx-h100--xid13"):
        root = tmp_path / machine
        build_kernel_log(machine, root, "h")
        live = _probe("kmsg", root)
        text = (root / "dev" / "kmsg").read_text()
        dmesg = "".join(f"[{int(r.split(',')[2]) / 1e6:12.6f}] {r.split(';', 1)[1]}\n" for r in text.splitlines())
        for body in (text, dmesg):
            assert _events(import_texts([("k.txt", body)]).facts["kmsg"]) == _events(live), machine


# -- NIC ----------------------------------------------------------------------------------------------

# What both sides show of an HCA and its ports (the rest text cannot print: unknown there).
DEVICE_KEYS = ("name", "hca_type", "model", "fw_ver", "node_guid", "sys_image_guid")
PORT_KEYS = ("port", "state", "phys_state", "rate_gbps", "link_layer", "port_guid")
IBSTATUS_DEVICE_KEYS = ("name",)


def _shown(section: dict[str, Any], dev_keys: tuple[str, ...]) -> list[dict[str, Any]]:
    return [{**{k: d.get(k) for k in dev_keys}, "ports": [{k: p.get(k) for k in PORT_KEYS} for p in d["ports"]]}
            for d in section["devices"]]


@pytest.mark.parametrize("machine", ["dgx-h100", "dgx-h100--ib-port-down", "gb200-tray", "xe9780-7xb300"])
def test_ibstat_and_ibstatus_of_a_machine_give_the_probes_devices(tmp_path: Path, machine: str) -> None:
    root = build_machine(machine, tmp_path / "root")
    build_nic_state(machine, root, "h")
    res = subprocess.run([sys.executable, "-"], input=build_script("nic", {"root": str(root)}, deadline_s=20),
                         capture_output=True, timeout=60, check=True)
    raw = json.loads(res.stdout)["data"]
    live = normalize_host({"nic": raw})[0]["nic"]
    assert live["devices"] and all(d["sys_image_guid"] and d["ports"][0]["port_guid"] for d in live["devices"])
    text = import_texts([("ibstat.txt", textout.ibstat(raw["infiniband"]))]).facts["nic"]
    assert _shown(text, DEVICE_KEYS) == _shown(live, DEVICE_KEYS)
    assert set(text["unknown"]) == {"bus_id", "counters", "netdevs"}
    # ibstatus prints no HCA type, firmware or node GUID; its default GID carries the port GUID
    status = import_texts([("ibstatus.txt", textout.ibstatus(raw["infiniband"]))]).facts["nic"]
    assert _shown(status, IBSTATUS_DEVICE_KEYS) == _shown(live, IBSTATUS_DEVICE_KEYS)
