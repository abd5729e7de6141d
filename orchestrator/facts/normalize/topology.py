"""Merge gpus + nvlink + pcie facts into the `nvidia-smi topo -m` matrix (`facts["topology"]`).

Pure.  GPU pair: NV# when NVLink is active between them, else NVML's common-ancestor level, else
the PCIe probe's level.  Anything involving a NIC comes from the PCIe probe.  A cell nobody can
answer stays null.  Shape: docs/facts-gpus.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.facts.model import TopologyDevice, TopologyFacts


def _pcie_lookup(pcie: Mapping[str, Any] | None) -> tuple[dict[str, int], list[list[str | None]], list[str], list[str]]:
    """(bus id -> row of `cells`, cells, NIC bus ids, NIC names) from the PCIe probe's levels.
    cells[i][j] is the level between order[i] and order[j] when the matrix holds a string there.
    Positions, not a dict keyed by bus-id pairs: that dict cost a third of the merge's time."""
    levels = (pcie or {}).get("levels") or {}
    order = [str(b) for b in levels.get("order") or []]
    matrix = levels.get("matrix") or []
    n = len(order)
    cells: list[list[str | None]] = []
    for i in range(n):
        row = matrix[i] if i < len(matrix) and isinstance(matrix[i], list) else []
        cells.append([v if isinstance(v, str) else None for v in row[:n]] + [None] * (n - min(len(row), n)))
    pos: dict[str, int] = {}
    if len(set(order)) == n:
        pos = {b: i for i, b in enumerate(order)}
    else:
        # A bus id listed twice (not what the normalizer writes): the last string cell for each
        # pair of bus ids counts, as a dict keyed by the pair would have it.
        pairs: dict[tuple[str, str], str | None] = {}
        for i, a in enumerate(order):
            for j, b in enumerate(order):
                if cells[i][j] is not None:
                    pairs[(a, b)] = cells[i][j]
        uniq = list(dict.fromkeys(order))
        pos = {b: i for i, b in enumerate(uniq)}
        cells = [[pairs.get((a, b)) for b in uniq] for a in uniq]
    nics = [str(b) for b in (pcie or {}).get("nics") or [] if b in order] or [
        b for b, lab in zip(order, levels.get("labels") or []) if str(lab).startswith("NIC")]
    names = [str(x) for x in levels.get("nic_names") or []]
    return pos, cells, nics, names


def merge(gpus: Mapping[str, Any] | None, nvlink: Mapping[str, Any] | None,
          pcie: Mapping[str, Any] | None) -> TopologyFacts:
    pcie_pos, pcie_cells, nics, nic_names = _pcie_lookup(pcie)
    gpu_order: list[str] = [b for b in (gpus or {}).get("order") or [] if b]
    if not gpu_order:
        gpu_order = [b for b in (nvlink or {}).get("order") or [] if b] or list((pcie or {}).get("gpus") or [])
    by_bus = {g.get("bus_id"): g for g in (gpus or {}).get("list") or []}
    pdev = {d.get("bdf"): d for d in (pcie or {}).get("devices") or [] if isinstance(d, dict)}
    # NV# by bus-id pair
    nv_pairs: dict[tuple[str, str], int] = {}
    nv_order = (nvlink or {}).get("order") or []
    for i, row in enumerate((nvlink or {}).get("nv") or []):
        for j, v in enumerate(row or []):
            if v and i < len(nv_order) and j < len(nv_order):
                nv_pairs[(nv_order[i], nv_order[j])] = int(v)
    nvml_levels: dict[tuple[str, str], str] = {}
    g_order = (gpus or {}).get("order") or []
    for i, row in enumerate((gpus or {}).get("levels") or []):
        for j, v in enumerate(row or []):
            if isinstance(v, str) and v != "X" and i < len(g_order) and j < len(g_order):
                nvml_levels[(g_order[i], g_order[j])] = v

    devices: list[TopologyDevice] = []
    for k, b in enumerate(gpu_order):
        g = by_bus.get(b) or {}
        numa = (pdev.get(b) or {}).get("numa")
        devices.append({"name": f"GPU{k}", "kind": "gpu", "bus_id": b, "cpu_affinity": g.get("cpu_affinity")
                        or (pdev.get(b) or {}).get("local_cpulist"), "numa": numa})
    for k, b in enumerate(nics):
        label = nic_names[k] if k < len(nic_names) else (pdev.get(b) or {}).get("label")
        devices.append({"name": f"NIC{k}", "kind": "nic", "bus_id": b, "label": label})

    n = len(devices)
    matrix: list[list[str | None]] = [[None] * n for _ in range(n)]
    source: list[list[str | None]] = [[None] * n for _ in range(n)]
    buses = [d["bus_id"] for d in devices]
    is_gpu = [d["kind"] == "gpu" for d in devices]
    rows = [pcie_pos.get(b) if isinstance(b, str) else None for b in buses]  # each device's PCIe row
    for i in range(n):
        # the row's values as locals: this body runs n^2 times a host (324 cells for 8 GPUs and 10
        # NICs), and indexing them anew in each cell was 40 % of the merge
        matrix_row, source_row, bus, gpu = matrix[i], source[i], buses[i], is_gpu[i]
        row = rows[i]
        pcie_row = pcie_cells[row] if row is not None else None
        for j in range(n):
            if i == j:
                matrix_row[j], source_row[j] = "X", "self"
                continue
            if gpu and is_gpu[j]:
                key = (bus, buses[j])
                if key in nv_pairs:
                    matrix_row[j], source_row[j] = f"NV{nv_pairs[key]}", "nvlink"
                    continue
                if key in nvml_levels:
                    matrix_row[j], source_row[j] = nvml_levels[key], "nvml"
                    continue
            col = rows[j]
            cell = pcie_row[col] if pcie_row is not None and col is not None else None
            if cell is not None and cell != "X":
                matrix_row[j], source_row[j] = cell, "pcie"
    return {"devices": devices, "matrix": matrix, "source": source}


def merge_facts(facts: Mapping[str, Any]) -> TopologyFacts | None:
    """The MERGERS entry: facts of one host -> the topology section, None when no source ran."""
    gpus, nvlink, pcie = facts.get("gpus"), facts.get("nvlink"), facts.get("pcie")
    if not (gpus or nvlink or pcie):
        return None
    return merge(gpus, nvlink, pcie)
