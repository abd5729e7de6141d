"""Recognise which command printed a text, from its content alone.

Order matters: the most specific markers are tried first (XML, the -q banner), and a matrix is
told apart as topo -m or topo -p2p by the values in its cells, not by its header.
"""

from __future__ import annotations

import re

from orchestrator.facts.textparse import csvquery, ibstat, kernel_log, perftest, smi_screen
from orchestrator.facts.textparse.common import MAX_LINE, text_lines, untagged
from orchestrator.facts.textparse.nvlink import GPU_LINE
from orchestrator.facts.textparse.topo import LEVEL_TOKEN, P2P_TOKEN, _header_tokens

# Every kind this package parses.  "unknown" when nothing fits.
KINDS = (
    "topo_matrix",
    "topo_p2p",
    "topo_cpu",
    "nvlink_status",
    "nvlink_caps",
    "smi_list",
    "smi_query",
    "smi_query_xml",
    "smi_query_csv",
    "smi_screen",
    "lspci_tree",
    "lspci_verbose",
    "kernel_log",
    "ibstat",
    "p2p_bandwidth_latency",
    "nvbandwidth",
    "nccl_tests",
    "perftest",
)
PARSED_KINDS = KINDS

# an nccl-tests data row: size, count, type, then numbers (the table without its header)
_NCCL_ROW = re.compile(r"^#?\s*\d+\s+\d+\s+(?:float|half|double|bfloat16|int8|uint8|int32|uint32|int64|uint64)\s+\S+\s+"
                       r"-?[\d.]+\s", re.M)
_LSPCI_HEADER = re.compile(r"^(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\s+[^:]+?(?:\s\[[0-9a-fA-F]{4}\])?:\s")
_TREE = re.compile(r"^[\s|+\\`-]*[-+\\`]-?(?:\[(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}\]|[0-9a-fA-F]{2}\.[0-7])")


def _matrix_kind(lines: list[str]) -> str | None:
    for i, line in enumerate(lines):
        parsed = _header_tokens(line)
        if not parsed:
            continue
        levels = p2p = 0
        for row in lines[i + 1 : i + 40]:
            toks = row.split()
            if not toks or toks[0] not in parsed[0]:
                continue
            for t in toks[1:]:
                if t in ("X",):
                    continue
                if LEVEL_TOKEN.fullmatch(t):
                    levels += 1
                elif P2P_TOKEN.fullmatch(t):
                    p2p += 1
        if levels or p2p:
            return "topo_matrix" if levels >= p2p else "topo_p2p"
        # One GPU (only X cells): the affinity columns or the legend still say which command it was.
        rest = "\n".join(lines[i + 1 :])
        if parsed[1] or re.search(r"^\s*NV#\s*=", rest, re.M):
            return "topo_matrix"
        if re.search(r"^\s*OK\s*=\s*Status Ok", rest, re.M | re.I):
            return "topo_p2p"
        return None
    return None


def _head(text: str, size: int = 200000) -> str:
    """The first `size` characters of the lines a tool prints: a line past MAX_LINE (a 1 MiB
    line at the top) is left out rather than hiding every line after it from detection."""
    if len(text) <= MAX_LINE or max(map(len, text[:size + MAX_LINE].split("\n"))) <= MAX_LINE:
        return text[:size]
    kept, total = [], 0
    for line in text.split("\n"):
        if len(line) <= MAX_LINE:
            kept.append(line)
            total += len(line) + 1
            if total >= size:
                break
    return "\n".join(kept)[:size]


def detect_kind(text: str) -> str:
    """One of KINDS, or "unknown"."""
    head = untagged(_head(text))
    stripped = head.lstrip()
    if stripped.startswith("<?xml") or "<nvidia_smi_log" in head:
        return "smi_query_xml"
    if "NVSMI LOG" in head or re.search(r"^\s*(Attached GPUs|Driver Version|KMD Version)\s+:", head, re.M):
        return "smi_query"
    # a -q excerpt that starts at a GPU block (the banner and Attached GPUs cut away)
    if re.search(r"^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]\s*\n\s+\S[^:\n]*\s:\s", head, re.M):
        return "smi_query"
    if perftest.looks_like(head):
        return "perftest"
    if "[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]" in head or "P2P Connectivity Matrix" in head:
        return "p2p_bandwidth_latency"
    if re.search(r"^nvbandwidth Version", head, re.M) or re.search(r"^Running \w+_(ce|sm)\.", head, re.M):
        return "nvbandwidth"
    if stripped.startswith("{") and re.search(r'"(nvbandwidth|testcases)"\s*:', head):
        return "nvbandwidth"
    if (re.search(r"^#?\s*size\s+count\s+type\s+(redop|root|time)\b", head, re.M)
            or re.search(r"Avg bus bandwidth\s*:", head) or re.search(r"^#?\s*nThread\s+\d+\s+nGpus\s+\d+", head, re.M)
            or len(_NCCL_ROW.findall(head)) >= 2
            or (re.search(r"_perf\b.*\b-b\s", head) and re.search(r"\b(algbw|busbw)\b", head, re.I))):
        return "nccl_tests"
    if stripped.startswith(("{", "[")) and re.search(r'"bus_?bw"', head, re.I):
        return "nccl_tests"
    if re.search(r"--query-gpu[= ]", head) or csvquery.looks_like(head):
        return "smi_query_csv"
    if re.search(r"^\s*\d+\s*,\s*(?:NVIDIA|Tesla|GeForce|Quadro)[^,]*,", head, re.M):
        return "smi_query_csv"
    if re.search(r"GPUs that have an affinity with CPU\s+\d+", head):
        return "topo_cpu"
    if re.search(r"^\s*Link\s+\d+\s*,\s*[^:]+:\s*(true|false)\s*$", head, re.M | re.I):
        return "nvlink_caps"
    if re.search(r"^\s*Link\s+\d+\s*:\s*(\d|<)", head, re.M) or re.search(r"all links are in\s*active", head, re.I):
        return "nvlink_status"
    if ibstat.looks_like(head):
        return "ibstat"
    if kernel_log.looks_like(head.splitlines()):
        return "kernel_log"
    lines = text_lines(head, None)
    kind = _matrix_kind(lines)
    if kind:
        return kind
    if any(_TREE.match(x) for x in lines[:50]) and any(re.search(r"-\[|\[[0-9a-fA-F]{4}:", x) for x in lines[:50]):
        return "lspci_tree"
    if any(_LSPCI_HEADER.match(x) for x in lines) or re.search(r"^\s*Lnk(Sta|Cap):", head, re.M):
        return "lspci_verbose"
    if any(GPU_LINE.match(x) for x in lines):
        return "smi_list"
    # last: benchmark logs often begin with the screen, and are read as the benchmark they are
    if smi_screen.looks_like(head):
        return "smi_screen"
    return "unknown"
