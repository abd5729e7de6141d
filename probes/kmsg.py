# Probe `kmsg`: the kernel log lines of this boot that matter for GPU/NIC health, read the least
# privileged way that works: `journalctl -k -b -o json` (members of systemd-journal/adm), else
# /dev/kmsg (root, or kernel.dmesg_restrict=0), else `dmesg -r`.  Read-only and bounded: at most
# `max_lines` matching lines (the newest are kept) out of at most `max_bytes` read, each source
# under the probe's own deadline.  Raw lines only: the controller extracts the events
# (orchestrator/facts/normalize/kmsg.py).  Argument `root` (fixtures) reads <root>/dev/kmsg as a
# file in /dev/kmsg record format and <root>/proc/... and runs no command.
import errno
import json
import os
import re
import subprocess

PROBE_NAME = "kmsg"
PROBE_VERSION = "1.0"
PROBE_DESCRIPTION = "kernel log of this boot: NVRM Xid, NVSwitch SXid, fallen off the bus, PCIe AER, mlx5, peermem, segfaults"
PASSIVE = True

# A cheap prefilter, so only candidate lines travel; the controller decides what each one is.
_KEEP = re.compile(r"NVRM|SXid|nvidia|nvswitch|AER|PCIe Bus Error|mlx5|peermem|segfault|"
                   r"NETDEV WATCHDOG|fallen off", re.IGNORECASE)
_DMESG_RAW = re.compile(r"^<(\d+)>\[\s*(\d+\.\d+)\]\s?(.*)$")
_KMSG_REC = re.compile(r"^(\d+),(\d+),(\d+),[^;]*;(.*)$")
_JOURNAL_HINT = ("not seeing messages", "No journal files", "insufficient permissions")


def _p(ctx, path):
    return os.path.join(ctx.args.get("root") or "/", path.lstrip("/"))


def _read(ctx, path):
    try:
        return ctx.read_text(_p(ctx, path))
    except PermissionError:
        return None


class _Lines(object):
    """The matching lines, bounded: the newest `max_lines` are kept."""

    def __init__(self, max_lines):
        self.max_lines = max_lines
        self.items = []
        self.scanned = 0
        self.dropped = 0
        self.boot_id = None  # journald names the boot of each entry

    def add(self, t, msg, wall=None):
        self.scanned += 1
        if not _KEEP.search(msg):
            return
        rec = {"t": t, "msg": msg[:2000]}
        if wall is not None:
            rec["wall"] = wall
        self.items.append(rec)
        if len(self.items) > self.max_lines:
            del self.items[0]
            self.dropped += 1


def _timeout(ctx):
    return max(1.0, min(30.0, ctx.remaining() - 2.0))


def _journalctl(ctx, lines, max_bytes):
    cmd = ["journalctl", "-k", "-b", "0", "-o", "json", "--no-pager", "-q",
           "-n", str(int(ctx.args.get("journal_lines") or 20000))]
    try:
        res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=_timeout(ctx))
    except OSError as e:
        return "journalctl not usable (%s)" % (e.strerror or e)
    except subprocess.TimeoutExpired:
        return "journalctl did not answer in time"
    err = res.stderr.decode("utf-8", "replace").strip()
    if res.returncode != 0:
        return "journalctl exited %d: %s" % (res.returncode, err[:200])
    n = 0
    for raw in res.stdout[-max_bytes:].splitlines():
        try:
            entry = json.loads(raw.decode("utf-8", "replace"))
        except ValueError:
            continue
        msg = entry.get("MESSAGE")
        if isinstance(msg, list):  # journald stores non-UTF-8 messages as a byte array
            msg = bytes(bytearray(b & 0xff for b in msg if isinstance(b, int))).decode("utf-8", "replace")
        if not isinstance(msg, str):
            continue
        n += 1
        lines.boot_id = lines.boot_id or entry.get("_BOOT_ID")
        try:
            t = int(entry.get("__MONOTONIC_TIMESTAMP")) / 1e6
        except (TypeError, ValueError):
            t = None
        try:
            wall = int(entry.get("__REALTIME_TIMESTAMP")) / 1e6
        except (TypeError, ValueError):
            wall = None
        lines.add(t, msg, wall)
    if n == 0:
        # An unprivileged user gets an empty, successful answer and a hint on stderr.
        hint = [h for h in _JOURNAL_HINT if h.lower() in err.lower()]
        return ("journalctl shows no kernel messages to this user (%s)" % err[:160] if hint
                else "journalctl holds no kernel messages of this boot")
    return None


def _kmsg(ctx, lines, max_bytes):
    path = _p(ctx, "/dev/kmsg")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        if e.errno in (errno.EACCES, errno.EPERM):
            return "/dev/kmsg is readable by root only (kernel.dmesg_restrict)"
        return "/dev/kmsg: %s" % (e.strerror or e)
    chunks = []
    total = 0
    try:
        while total < max_bytes and ctx.remaining() > 2.0:
            try:
                # One record per read on the real device; a fixture file gives chunks of records.
                buf = os.read(fd, 65536)
            except OSError as e:
                if e.errno == errno.EAGAIN:
                    break  # everything in the ring buffer has been read
                if e.errno == errno.EPIPE:
                    continue  # a record was overwritten while we read: go on with the next
                if e.errno in (errno.EACCES, errno.EPERM):
                    return "/dev/kmsg is readable by root only (kernel.dmesg_restrict)"
                return "/dev/kmsg: %s" % (e.strerror or e)
            if not buf:
                break
            chunks.append(buf)
            total += len(buf)
    finally:
        os.close(fd)
    n = 0
    for line in b"".join(chunks).decode("utf-8", "replace").splitlines():
        m = _KMSG_REC.match(line)
        if not m:
            continue  # continuation lines (" SUBSYSTEM=...") carry device properties
        n += 1
        lines.add(int(m.group(3)) / 1e6, m.group(4).replace("\\x0a", " "))
    return None if n else "/dev/kmsg gave no records"


def _dmesg(ctx, lines, max_bytes):
    try:
        res = subprocess.run(["dmesg", "-r"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             timeout=_timeout(ctx))
    except OSError as e:
        return "dmesg not usable (%s)" % (e.strerror or e)
    except subprocess.TimeoutExpired:
        return "dmesg did not answer in time"
    if res.returncode != 0:
        return "dmesg exited %d: %s" % (res.returncode, res.stderr.decode("utf-8", "replace").strip()[:200])
    n = 0
    for line in res.stdout[-max_bytes:].decode("utf-8", "replace").splitlines():
        m = _DMESG_RAW.match(line)
        if m:
            n += 1
            lines.add(float(m.group(2)), m.group(3))
    return None if n else "dmesg gave no lines"


_SOURCES = (("journalctl", _journalctl), ("kmsg", _kmsg), ("dmesg", _dmesg))


def collect(ctx):
    max_lines = int(ctx.args.get("max_lines") or 5000)
    max_bytes = int(ctx.args.get("max_bytes") or 16 * 2**20)
    fixture = bool(ctx.args.get("root"))
    wanted = ctx.args.get("sources") or (["kmsg"] if fixture else [n for n, _ in _SOURCES])
    data = {
        "boot_id": _read(ctx, "/proc/sys/kernel/random/boot_id"),
        "boot_time": None,
        "uid": os.geteuid(),
        "source": None,
        "readable": False,
        "attempts": [],
        "lines": [],
        "lines_scanned": 0,
        "lines_dropped": 0,
        "max_lines": max_lines,
    }
    stat = _read(ctx, "/proc/stat") or ""
    m = re.search(r"^btime\s+(\d+)", stat, re.MULTILINE)
    if m:
        data["boot_time"] = int(m.group(1))
    ctx.partial = data
    for name, fn in _SOURCES:
        if name not in wanted:
            continue
        if ctx.remaining() < 3.0:
            data["attempts"].append({"source": name, "error": "deadline near: not tried"})
            continue
        lines = _Lines(max_lines)
        why = fn(ctx, lines, max_bytes)
        if why is None:
            data.update(source=name, readable=True, lines=lines.items, lines_scanned=lines.scanned,
                        lines_dropped=lines.dropped)
            data["boot_id"] = data["boot_id"] or lines.boot_id
            break
        data["attempts"].append({"source": name, "error": why})
    return data
