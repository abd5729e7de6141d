"""The report's pictures as inline SVG, drawn by our own code (no library, no network).

Input is the view model from `model.py`, output an `<svg>` string.  All markup is built by `_el`,
which XML-escapes every attribute value (`quoteattr`) and every text node (`escape`), so a host
name like `"><script>` stays text.  Colours come from CSS classes in the page stylesheet, so the
pictures follow the page's palette and stay small.
"""

from __future__ import annotations

import math
from xml.sax.saxutils import escape, quoteattr

from orchestrator.present.report.model import HeatCell, NvlinkGraph, P2pHeat, PcieNode


def _f(x: float) -> str:
    """A coordinate: one decimal at most, no trailing zeros (keeps the file small)."""
    return f"{x:.1f}".rstrip("0").rstrip(".")


def _el(tag: str, attrs: dict[str, object] | None = None, *children: str, text: str | None = None) -> str:
    """One element.  Attribute values and `text` are escaped here; `children` are elements
    already built by `_el`.  Float attribute values are rounded by `_f`."""
    parts = [tag]
    for key, value in (attrs or {}).items():
        shown = _f(value) if isinstance(value, float) else str(value)
        parts.append(f"{key}={quoteattr(shown)}")
    inner = (escape(text) if text is not None else "") + "".join(children)
    return f"<{' '.join(parts)}>{inner}</{tag}>"


def _svg(width: float, height: float, kind: str, title: str, body: list[str]) -> str:
    return _el("svg", {"xmlns": "http://www.w3.org/2000/svg", "class": f"pic pic-{kind}", "data-picture": kind,
                       "width": width, "height": height, "viewBox": f"0 0 {_f(width)} {_f(height)}",
                       "role": "img", "aria-label": title},
               _el("title", text=title), *body)


# ----------------------------------------------------------------------------------------------
# A class's health


def health_svg(counts: list[tuple[str, int]], title: str = "hosts by health") -> str:
    """One bar per health (healthy, degraded, failed, not judged), its length the share of the
    class's hosts, the count written beside it: a class's state at a glance, on paper too."""
    total = max(sum(n for _, n in counts), 1)
    bar_x, bar_w, row_h = 90.0, 220.0, 18.0
    body: list[str] = []
    for i, (health, n) in enumerate(counts):
        y = 4 + i * row_h
        body.append(_el("g", {"class": "hb hb-" + health.replace(" ", "-"), "data-health": health, "data-count": n},
                        _el("text", {"class": "hb-label", "x": 0.0, "y": y + 12}, text=health),
                        _el("rect", {"class": "hb-track", "x": bar_x, "y": y + 2, "width": bar_w, "height": row_h - 6}),
                        _el("rect", {"class": "hb-bar", "x": bar_x, "y": y + 2, "width": bar_w * n / total,
                                     "height": row_h - 6}),
                        _el("text", {"class": "hb-count", "x": bar_x + bar_w + 6, "y": y + 12}, text=str(n))))
    return _svg(bar_x + bar_w + 40, 8 + len(counts) * row_h, "health", title, body)


# ----------------------------------------------------------------------------------------------
# NVLink graph


def nvlink_svg(graph: NvlinkGraph, title: str = "NVLink graph") -> str:
    """GPUs on top, NVSwitches below (bipartite); without switches the GPUs sit on a circle.
    Edge width grows with the bonded link count; a bond with any link down is red and dashed
    and its label says how many are down.  A GPU with a down link is outlined red and says
    "17/18 up"; a down link whose far end NVML could not name is a red stub off the GPU."""
    gpus = [n for n in graph.nodes if n.kind == "gpu"]
    others = [n for n in graph.nodes if n.kind != "gpu"]
    pos: dict[str, tuple[float, float]] = {}
    node_w, node_h = 84.0, 36.0
    if others:
        cols = max(len(gpus), len(others))
        width = max(cols * 104.0 + 40, 360.0)
        for i, n in enumerate(gpus):
            pos[n.id] = (width * (i + 0.5) / len(gpus), 40.0)
        for i, n in enumerate(others):
            pos[n.id] = (width * (i + 0.5) / len(others), 230.0)
        height = 275.0
    else:
        count = max(len(gpus), 1)
        radius = max(90.0, count * 22.0)
        width = height = 2 * radius + 120
        for i, n in enumerate(gpus):
            angle = -math.pi / 2 + 2 * math.pi * i / count
            pos[n.id] = (width / 2 + radius * math.cos(angle), height / 2 + radius * math.sin(angle))
    labels = {n.id: n.label for n in graph.nodes}
    row_of = {n.id: i for i, n in enumerate(others)}
    body: list[str] = []
    # Healthy edges first so red ones are drawn on top of them.
    for edge in sorted(graph.edges, key=lambda e: e.down > 0):
        if edge.a not in pos or edge.b not in pos:
            continue
        (x1, y1), (x2, y2) = pos[edge.a], pos[edge.b]
        down = edge.down > 0
        label = f"{edge.links} ({edge.down} down)" if down else str(edge.links)
        tip = f"{labels[edge.a]} - {labels[edge.b]}: {edge.links} link(s), {edge.down} down"
        if others:
            # The labels of the edges to one switch share a band at their own height, so the fan
            # of edges leaving one GPU never stacks its labels on one spot.
            k = row_of.get(edge.b, row_of.get(edge.a, 0))
            t = 0.2 + 0.48 * k / max(1, len(others) - 1)
        else:
            t = 0.5
        body.append(_el("g", {"class": "edge edge-down" if down else "edge", "data-down": edge.down},
                        _el("title", text=tip),
                        _el("line", {"x1": x1, "y1": y1, "x2": x2, "y2": y2,
                                     "stroke-width": 1.0 + min(edge.links, 18) / 3.0}),
                        _el("text", {"class": "edge-label", "x": x1 + (x2 - x1) * t, "y": y1 + (y2 - y1) * t + 4},
                            text=label)))
    for n in graph.nodes:
        if n.id not in pos:
            continue
        x, y = pos[n.id]
        sub = f"{n.links - n.down}/{n.links} up" if n.down else f"{n.links} links"
        if n.down_unattached:
            # Off the node's right edge, so it does not sit on the edge labels below the node.
            sx, sy = x + node_w / 2 - 8, y + node_h / 2
            ex, ey = (sx + 10, sy + 26) if others else (x + (x - width / 2) * 0.25, y + (y - height / 2) * 0.25)
            body.append(_el("g", {"class": "edge edge-down stub", "data-down": n.down_unattached},
                            _el("title", text=f"{n.label}: {n.down_unattached} link(s) down, far end unknown"),
                            _el("line", {"x1": sx, "y1": sy, "x2": ex, "y2": ey, "stroke-width": 3}),
                            _el("text", {"class": "stub-label", "x": ex + 3, "y": ey + 4},
                                text=f"{n.down_unattached} down")))
        health = f" node-{n.health.split(':', 1)[0]}" if n.health else ""  # the verdict's, when it faulted
        body.append(_el("g", {"class": f"node node-{n.kind}" + (" node-down" if n.down else "") + health},
                        _el("title", text=f"{n.label} {n.id}: {sub}" + (f" ({n.health})" if n.health else "")),
                        _el("rect", {"x": x - node_w / 2, "y": y - node_h / 2, "width": node_w, "height": node_h,
                                     "rx": 5}),
                        _el("text", {"x": x, "y": y - 2}, text=n.label),
                        _el("text", {"class": "sub", "x": x, "y": y + 12}, text=sub)))
    return _svg(width, height, "nvlink", title, body)


# ----------------------------------------------------------------------------------------------
# PCIe tree


def pcie_svg(roots: list[PcieNode], title: str = "PCIe tree") -> str:
    """The `lspci -tv` view as boxes: one row per device, indented by depth, elbow connectors.
    Downgraded links get a red outline and red link text.  An uplink shared by GPUs and NICs says
    who shares it; when a finding names it, the switch is filled amber and its GPUs and NICs are
    outlined amber."""
    rows: list[tuple[int, PcieNode, PcieNode | None, bool]] = []

    def walk(node: PcieNode, depth: int, parent: PcieNode | None, shared: bool) -> None:
        rows.append((depth, node, parent, shared))
        for child in sorted(node.children, key=lambda c: c.bus_id):
            walk(child, depth + 1, node, shared or node.shared_uplink)

    for root in sorted(roots, key=lambda r: r.bus_id):
        walk(root, 0, None, False)
    row_h, indent, box_w = 30.0, 28.0, 300.0
    max_depth = max((d for d, *_ in rows), default=0)
    width = 10 + max_depth * indent + box_w + 340
    height = len(rows) * row_h + 10
    index = {id(node): i for i, (_, node, _, _) in enumerate(rows)}
    body: list[str] = []
    for i, (depth, node, parent, shared) in enumerate(rows):
        x = 10 + depth * indent
        y = 5 + i * row_h
        if parent is not None:
            px = 10 + (depth - 1) * indent + 10
            py = 5 + index[id(parent)] * row_h + row_h - 6
            body.append(_el("path", {"class": "wire", "d": f"M{_f(px)} {_f(py)} V{_f(y + 12)} H{_f(x)}"}))
        classes = ["dev", "dev-" + node.kind]
        if node.downgraded:
            classes.append("dev-downgraded")
        if node.shared_uplink:
            classes.append("dev-shared")
        elif node.note:
            classes.append("dev-noted")
        elif shared and node.kind in ("gpu", "nic"):
            classes.append("dev-sharer")
        if node.health:  # the verdict faulted the device: "dev-failed" / "dev-degraded"
            classes.append("dev-" + node.health.split(":", 1)[0])
        side = "  ".join(s for s in (node.link, node.note) if s)
        body.append(_el("g", {"class": " ".join(classes), "data-bdf": node.bus_id},
                        _el("title", text=f"{node.label} {node.bus_id} {node.name} {node.link} {node.note} "
                                          f"{node.health}".strip()),
                        _el("rect", {"x": float(x), "y": y, "width": box_w, "height": row_h - 6, "rx": 4}),
                        _el("text", {"x": x + 6.0, "y": y + 16}, text=_clip(f"{node.label}  {node.bus_id}  {node.name}", 46)),
                        _el("text", {"class": "side", "x": x + box_w + 8, "y": y + 16}, text=_clip(side, 56))))
    return _svg(width, height, "pcie", title, body)


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


# ----------------------------------------------------------------------------------------------
# P2P heat map


def ratio_class(cell: HeatCell) -> str:
    """Red under the expected floor or when the copied data differed, amber within 5% above the
    floor, green beyond; grey when there is no floor to compare with."""
    if cell.verified is False and cell.measured is not None:
        return "hm-corrupt"
    r = cell.ratio
    if r is None:
        return "hm-none" if cell.measured is None else "hm-noexp"
    if r < 1.0:
        return "hm-bad"
    if r < 1.05:
        return "hm-low"
    return "hm-good"


def p2p_svg(heat: P2pHeat, title: str = "P2P bandwidth") -> str:
    """Rows are sources, columns destinations.  Each cell shows the measured value and
    measured/expected, where expected is the floor the pair should reach; red below it."""
    n = len(heat.labels)
    cw, ch, left, top = 66.0, 40.0, 64.0, 44.0
    width = left + n * cw + 10
    height = top + n * ch + 30
    body = [_el("text", {"class": "axis", "x": left, "y": 14}, text="destination →"),
            _el("text", {"class": "axis", "x": 4, "y": top - 6}, text="source ↓")]
    for j, label in enumerate(heat.labels):
        body.append(_el("text", {"class": "axis", "text-anchor": "middle", "x": left + j * cw + cw / 2, "y": top - 10},
                        text=label))
    for i, label in enumerate(heat.labels):
        y = top + i * ch
        body.append(_el("text", {"class": "axis", "x": 4, "y": y + ch / 2 + 4}, text=label))
        for j in range(n):
            cell = heat.cells[i][j]
            x = left + j * cw
            if cell.measured is None:
                line1, line2 = ("—" if i != j else ""), ""
                tip = f"{label}→{heat.labels[j]}: not measured" if i != j else f"{label}: itself, not a peer pair"
            else:
                line1 = _f(cell.measured)
                line2 = f"{cell.ratio * 100:.0f}%" if cell.ratio is not None else ""
                expected = _f(cell.expected) if cell.expected else "unknown"
                tip = f"{label}→{heat.labels[j]}: {line1} {heat.unit}, expected {expected}"
                if cell.verified is False:
                    line2 = "CORRUPT"
                    tip += "; the copied data differed from what was written (p2p.data.mismatch)"
            body.append(_el("g", {"class": "cell " + ratio_class(cell)},
                            _el("title", text=tip),
                            _el("rect", {"x": x, "y": y, "width": cw - 2, "height": ch - 2}),
                            _el("text", {"x": x + cw / 2, "y": y + 16}, text=line1),
                            _el("text", {"class": "ratio", "x": x + cw / 2, "y": y + 31}, text=line2)))
    body.append(_el("text", {"class": "axis", "x": left, "y": height - 8},
                    text=f"{heat.title} in {heat.unit}; % = measured / expected; CORRUPT = data differed"))
    return _svg(width, height, "p2p", title, body)
