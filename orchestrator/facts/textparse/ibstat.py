"""`ibstat`, `ibstatus` and `ibv_devinfo` text -> the raw shape of the `nic` probe's InfiniBand
devices, so `facts/normalize/nic.py` builds the same records.  Text never names the PCI function
of an HCA: `bus_id` stays None (facts: unknown).  ibstat's `ibpanic: ... stat of IB device 'X'
failed` is an error of that HCA (its ports were never read), not a line to skip; a paste that lost
its indentation (markdown) reads the same."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from orchestrator.facts.numbers import COUNT, INDEX, NET_GBITS, float_or_none, int_or_none
from orchestrator.facts.textparse.common import Note, clean_lines, is_redacted
from orchestrator.facts.textsafe import is_digits

_IBSTAT_CA = re.compile(r"^CA '([^']+)'\s*$")
_IBSTATUS = re.compile(r"^Infiniband device '([^']+)' port (\d+) status:\s*$")
_DEVINFO = re.compile(r"^hca_id:\s*(\S+)\s*$")
_KV = re.compile(r"^\s*([A-Za-z_ ]+?):\s*(.*?)\s*$")
# ibstat's failure on one HCA, as each infiniband-diags prints it: libibmad's `ibpanic: [PID] main:
# stat of IB device 'X' failed: REASON`, rdma-core's `ibstat: iberror: failed: stat of IB device 'X'
# failed` (no reason; `[pid N] main: failed:` with debugging on): read by the message alone
_IBPANIC = re.compile(r"\bstat of IB device '([^']+)' failed(?::\s*\(?(.*?)\)?)?\s*$")
_MTU = re.compile(r"^\s*(\d+)")
# The command a poster ran, pasted with its prompt (`~$ ibstat mlx5_ib0`, `[root@n1 ~]# ibstatus`).
_PROMPT = re.compile(r"^\s*(?:\S*[$#%>]\s*)?(ibstat|ibstatus|ibv_devinfo)\b(.*)$")
# ibstat/ibv_devinfo spell states as words; sysfs (and the nic probe) as "4: ACTIVE".
# ibv_devinfo writes PORT_ACTIVE / LINK_UP: compared without the PORT_ prefix, blanks and underscores.
_STATE = {"active": "4: ACTIVE", "down": "1: DOWN", "initializing": "2: INIT", "init": "2: INIT",
          "armed": "3: ARMED"}
_PHYS = {"linkup": "5: LinkUp", "polling": "2: Polling", "disabled": "3: Disabled", "sleep": "1: Sleep",
         "linkerrorrecovery": "6: LinkErrorRecovery"}
# Keys that describe a port: met before any `Port N:` / `port:` line (a trimmed paste) they belong
# to no port the text names, and are noted rather than given to a guessed one.
_PORT_KEYS = ("state", "physical state", "phys state", "phys_state", "rate", "link layer", "link_layer", "port guid",
              "default gid", "active_mtu", "max_mtu")


@dataclass
class IbReport:
    source: str
    kind: str  # ibstat | ibstatus | ibv_devinfo
    devices: list[dict[str, Any]] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)


def looks_like(text: str) -> str | None:
    head = text[:200000]
    if re.search(r"^CA '[^']+'\s*$", head, re.M) and re.search(r"^\s+CA type:", head, re.M):
        return "ibstat"
    if re.search(r"^Infiniband device '[^']+' port \d+ status:", head, re.M):
        return "ibstatus"
    if re.search(r"^hca_id:\s*\S+", head, re.M) and re.search(r"^\s+(?:transport|fw_ver|vendor_part_id):", head, re.M):
        return "ibv_devinfo"  # transport: the whole output; fw_ver / vendor_part_id: a trimmed one
    if _IBPANIC.search(head.strip().split("\n")[0] if head.strip() else ""):
        return "ibstat"  # ibstat that failed on its first HCA printed nothing else
    if re.search(r"^CA '[^']+'\s*$", head, re.M) and re.search(r"^\s*CA type:", head, re.M):
        return "ibstat"  # the indentation lost in a paste
    return None


def _device(name: str) -> dict[str, Any]:
    return {"name": name, "bus_id": None, "driver": None, "hca_type": None, "board_id": None, "fw_ver": None,
            "node_guid": None, "sys_image_guid": None, "ports": []}


def _port(n: int | None) -> dict[str, Any]:
    """A port record; n None (a port number no HCA has) is dropped by the normalizer, with its lines."""
    return {"port": n, "state": None, "phys_state": None, "rate": None, "link_layer": None, "netdev": None,
            "port_guid": None, "counters": {}, "hw_counters": {}}


def _value(value: str) -> str | None:
    """The printed value; one the poster cut (`...`) is unknown, never a value."""
    v = value.strip()
    return None if not v or is_redacted(v) else v


def _word(table: dict[str, str], value: str) -> str | None:
    v = value.strip()
    if re.match(r"^\d+: \S+", v):  # ibstatus prints the sysfs text itself
        return v
    key = re.sub(r"^port_", "", re.sub(r"\s*\(\d+\)$", "", v).lower()).replace(" ", "").replace("_", "")
    return table.get(key, v or None)


def _rate(value: str) -> str | None:
    v = value.strip()
    if re.match(r"^\d+(\.\d+)?$", v):
        # ibstat prints the number only; past NET_GBITS it is no rate (unknown, not 'inf')
        return f"{v} Gb/sec" if float_or_none(v, NET_GBITS) is not None else None
    return v or None


def _guid(value: str) -> str | None:
    if _value(value) is None:
        return None
    v = value.strip().lower()
    if v.startswith("0x") and len(v) == 18:
        h = v[2:]
        return ":".join(h[i:i + 4] for i in range(0, 16, 4))
    return v or None


def _gid_guid(value: str) -> str | None:
    """ibstatus's `default gid` is GID 0: its last 64 bits are the port GUID ibstat prints (the rule
    probes/nic.py applies to sysfs ports/N/gids/0); an all-zero or cut GID is unknown."""
    parts = value.strip().lower().split(":")
    if len(parts) != 8 or not all(re.fullmatch(r"[0-9a-f]{4}", x) for x in parts) or parts[4:] == ["0000"] * 4:
        return None
    return ":".join(parts[4:])


def parse_ib(text: str, source: str) -> IbReport:
    kind = looks_like(text) or "ibstat"
    out = IbReport(source, kind)
    devs: dict[str, dict[str, Any]] = {}
    dev: dict[str, Any] | None = None
    port: dict[str, Any] | None = None
    lines, out.notes = clean_lines(text, source)
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if _PROMPT.match(line) and not _KV.match(line):
            out.notes.append(Note(n, f"command line: {line.strip()[:80]}"))
            continue
        m = _IBPANIC.search(line.strip())
        if m:
            dev = devs.setdefault(m.group(1), _device(m.group(1)))
            dev["error"] = f"ibstat could not read it (stat failed: {m.group(2) or 'no reason printed'})"
            port = None
            continue
        m = _IBSTAT_CA.match(line) or _DEVINFO.match(line)
        if m:
            dev = devs.setdefault(m.group(1), _device(m.group(1)))
            port = None
            continue
        m = _IBSTATUS.match(line)
        if m:
            dev = devs.setdefault(m.group(1), _device(m.group(1)))
            port = _port(int_or_none(m.group(2), INDEX))
            dev["ports"].append(port)
            continue
        m = re.match(r"^\s*Port (\d+):\s*$", line) or re.match(r"^\s*port:\s*(\d+)\s*$", line)
        if m and dev is not None:
            port = _port(int_or_none(m.group(1), INDEX))
            dev["ports"].append(port)
            continue
        m = _KV.match(line)
        if not m or dev is None:
            out.notes.append(Note(n, f"not understood: {line.strip()[:80]}"))
            continue
        key, value = m.group(1).strip().lower(), m.group(2)
        if port is None and key in _PORT_KEYS:
            out.notes.append(Note(n, f"{key} of {dev['name']} printed without its port line: not given to a port"))
            continue
        if port is not None and key in ("state",):
            port["state"] = _word(_STATE, value)
        elif port is not None and key in ("physical state", "phys state"):
            port["phys_state"] = _word(_PHYS, value)
        elif port is not None and key == "rate":
            port["rate"] = _rate(value)
        elif port is not None and key in ("link layer", "link_layer"):
            port["link_layer"] = _value(value)
        elif port is not None and key == "port guid":
            port["port_guid"] = _guid(value)
        elif port is not None and key == "default gid":
            port["port_guid"] = _gid_guid(value)
        elif port is not None and key in ("active_mtu", "max_mtu"):
            mtu = _MTU.match(value)
            port[key] = int_or_none(mtu.group(1), COUNT) if mtu else None
        elif key in ("ca type",):
            dev["hca_type"] = _value(value)
        elif key == "vendor_part_id" and is_digits(value.strip()):
            dev["hca_type"] = f"MT{value.strip()}"
        elif key in ("firmware version", "fw_ver"):
            dev["fw_ver"] = _value(value)
        elif key in ("node guid", "node_guid"):
            dev["node_guid"] = _guid(value)
        elif key in ("system image guid", "sys_image_guid"):
            dev["sys_image_guid"] = _guid(value)
        elif key == "board_id":
            dev["board_id"] = _value(value)
    out.devices = list(devs.values())
    return out
