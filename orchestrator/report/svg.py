"""The report's pictures as inline SVG, drawn by our own code (no library, no network).

Input is the view model from `model.py`, output a `<svg>` string.  Every string that reaches the
output goes through `_t` (element text) or `_a` (attribute value): both XML-escape, so a host
name like `"><script>` stays text.  Colours come from CSS classes in the page stylesheet, so the
pictures follow the page's palette and stay small.
"""

from __future__ import annotations

import math
from xml.sax.saxutils import escape, quoteattr

from orchestrator.report.model import HeatCell, NvlinkGraph, P2pHeat, PcieNode


def _t(text: object) -> str:
    return escape(str(text))


def _a(value: object) -> str:
    """An attribute value including its quotes."""
    return quoteattr(str(value))


def _f(x: float) -> str:
    return ("%.1f" % x).rstrip("0").rstrip(".")


def _svg(width: float, height: float, kind: str, title: str, body: list[str]) -> str:
    return ('<svg xmlns="http://www.w3.org/2000/svg" class="pic pic-%s" data-picture=%s width="%s" height="%s" '
            'viewBox="0 0 %s %s" role="img" aria-label=%s><title>%s</title>%s</svg>'
            % (kind, _a(kind), _f(width), _f(height), _f(width), _f(height), _a(title), _t(title), "".join(body)))


# ----------------------------------------------------------------------------------------------
# NVLink graph


def nvlink_svg(graph: NvlinkGraph, title: str = "NVLink graph") -> str:
    """GPUs on top, NVSwitches below (bipartite); without switches the GPUs sit on a circle.
    Edge width grows with the bonded link count; a bond with any link down is red and dashed
    and its label says how many are down."""
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
    body: list[str] = []
    row_of = {n.id: i for i, n in enumerate(others)}
    # Healthy edges first so red ones are drawn on top of them.
    for edge in sorted(graph.edges, key=lambda e: e.down > 0):
        if edge.a not in pos or edge.b not in pos:
            continue
        (x1, y1), (x2, y2) = pos[edge.a], pos[edge.b]
        down = edge.down > 0
        cls = "edge edge-down" if down else "edge"
        stroke = 1.0 + min(edge.links, 18) / 3.0
        label = "%d" % edge.links if not down else "%d (%d down)" % (edge.links, edge.down)
        tip = "%s - %s: %d link(s), %d down" % (_label(graph, edge.a), _label(graph, edge.b), edge.links, edge.down)
        if others:
            # Labels of the edges to one switch share a band at their own height, so a fan of
            # edges from one GPU never stacks its labels on one spot.
            k = row_of.get(edge.b, row_of.get(edge.a, 0))
            t = 0.2 + 0.48 * k / max(1, len(others) - 1)
        else:
            t = 0.5
        lx, ly = x1 + (x2 - x1) * t, y1 + (y2 - y1) * t
        body.append('<g class=%s data-down="%d"><title>%s</title>'
                    '<line x1="%s" y1="%s" x2="%s" y2="%s" stroke-width="%s"/>'
                    '<text class="edge-label" x="%s" y="%s">%s</text></g>'
                    % (_a(cls), edge.down, _t(tip), _f(x1), _f(y1), _f(x2), _f(y2), _f(stroke),
                       _f(lx), _f(ly + 4), _t(label)))
    for n in graph.nodes:
        if n.id not in pos:
            continue
        x, y = pos[n.id]
        links, down = n.links, n.down
        sub = "%d links" % links if not down else "%d/%d up" % (links - down, links)
        if n.down_unattached:
            # A down link with no known far end: a red stub off the node, so it is seen anyway.
            sy = y + node_h / 2
            dy = 34.0 if others else 0.0
            sx, ex, ey = (x, x, sy + dy) if others else (x, x + (x - width / 2) * 0.25, y + (y - height / 2) * 0.25)
            body.append('<g class="edge edge-down stub"><title>%s</title><line x1="%s" y1="%s" x2="%s" y2="%s" '
                        'stroke-width="3"/><text class="edge-label" x="%s" y="%s">%s</text></g>'
                        % (_t("%s: %d link(s) down, far end unknown" % (n.label, n.down_unattached)),
                           _f(sx), _f(sy), _f(ex), _f(ey), _f(ex), _f(ey + 12), _t("%d down" % n.down_unattached)))
        cls = "node node-%s%s" % (n.kind, " node-down" if down else "")
        body.append('<g class=%s><title>%s</title><rect x="%s" y="%s" width="%s" height="%s" rx="5"/>'
                    '<text x="%s" y="%s">%s</text><text class="sub" x="%s" y="%s">%s</text></g>'
                    % (_a(cls), _t("%s %s: %s" % (n.label, n.id, sub)), _f(x - node_w / 2), _f(y - node_h / 2),
                       _f(node_w), _f(node_h), _f(x), _f(y - 2), _t(n.label), _f(x), _f(y + 12), _t(sub)))
    return _svg(width, height, "nvlink", title, body)


def _label(graph: NvlinkGraph, node_id: str) -> str:
    for n in graph.nodes:
        if n.id == node_id:
            return n.label
    return node_id


# ----------------------------------------------------------------------------------------------
# PCIe tree


def pcie_svg(roots: list[PcieNode], title: str = "PCIe tree") -> str:
    """The `lspci -tv` view as boxes: one row per device, indented by depth, elbow connectors.
    Downgraded links get a red outline and their link text; a switch whose uplink is shared by a
    GPU and a NIC is amber and says who shares it, and those GPUs and NICs are outlined amber."""
    rows: list[tuple[int, PcieNode, PcieNode | None, bool]] = []

    def walk(node: PcieNode, depth: int, parent: PcieNode | None, shared: bool) -> None:
        rows.append((depth, node, parent, shared))
        for child in sorted(node.children, key=lambda c: (c.kind not in ("switch", "root_port"), c.bus_id)):
            walk(child, depth + 1, node, shared or node.shared_uplink)

    for root in sorted(roots, key=lambda r: r.bus_id):
        walk(root, 0, None, False)
    row_h, indent, box_w = 30.0, 28.0, 300.0
    max_depth = max((d for d, *_ in rows), default=0)
    width = 10 + max_depth * indent + box_w + 330
    height = len(rows) * row_h + 10
    index = {id(node): i for i, (_, node, _, _) in enumerate(rows)}
    body: list[str] = []
    for i, (depth, node, parent, shared) in enumerate(rows):
        x = 10 + depth * indent
        y = 5 + i * row_h
        if parent is not None:
            px = 10 + (depth - 1) * indent + 10
            py = 5 + index[id(parent)] * row_h + row_h - 6
            body.append('<path class="wire" d="M%s %s V%s H%s"/>' % (_f(px), _f(py), _f(y + 12), _f(x)))
        classes = ["dev", "dev-" + node.kind]
        if node.downgraded:
            classes.append("dev-downgraded")
        if node.shared_uplink:
            classes.append("dev-shared")
        elif shared and node.kind in ("gpu", "nic"):
            classes.append("dev-sharer")
        text = "%s  %s" % (node.label, node.bus_id)
        side = node.link
        if node.note:
            side = "%s  %s" % (side, node.note) if side else node.note
        tip = "%s %s %s %s" % (node.label, node.bus_id, node.name, node.link)
        body.append('<g class=%s><title>%s</title><rect x="%s" y="%s" width="%s" height="%s" rx="4"/>'
                    '<text x="%s" y="%s">%s</text><text class="side" x="%s" y="%s">%s</text></g>'
                    % (_a(" ".join(classes)), _t(tip), _f(x), _f(y), _f(box_w), _f(row_h - 6), _f(x + 6), _f(y + 16),
                       _t(_clip(text + "  " + node.name, 46)), _f(x + box_w + 8), _f(y + 16), _t(_clip(side, 52))))
    return _svg(width, height, "pcie", title, body)


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


# ----------------------------------------------------------------------------------------------
# P2P heat map


def ratio_class(cell: HeatCell) -> str:
    r = cell.ratio
    if r is None:
        return "hm-none" if cell.measured is None else "hm-noexp"
    if r < 0.5:
        return "hm-bad"
    if r < 0.9:
        return "hm-low"
    return "hm-good"


def p2p_svg(heat: P2pHeat, title: str = "P2P bandwidth") -> str:
    """Rows are sources, columns destinations.  Each cell shows the measured value and
    measured/expected; the colour is the ratio (red under 50%, amber under 90%)."""
    n = len(heat.labels)
    cw, ch, left, top = 66.0, 40.0, 64.0, 44.0
    width = left + n * cw + 10
    height = top + n * ch + 30
    body = ['<text class="axis" x="%s" y="14">destination →</text>' % _f(left),
            '<text class="axis" x="4" y="%s">source ↓</text>' % _f(top - 6)]
    for j, label in enumerate(heat.labels):
        body.append('<text class="axis" text-anchor="middle" x="%s" y="%s">%s</text>'
                    % (_f(left + j * cw + cw / 2), _f(top - 10), _t(label)))
    for i, label in enumerate(heat.labels):
        y = top + i * ch
        body.append('<text class="axis" x="4" y="%s">%s</text>' % (_f(y + ch / 2 + 4), _t(label)))
        for j in range(n):
            cell = heat.cells[i][j]
            x = left + j * cw
            cls = ratio_class(cell)
            if cell.measured is None:
                line1, line2, tip = ("—" if i != j else ""), "", "%s→%s: not measured" % (label, heat.labels[j])
            else:
                line1 = _f(cell.measured)
                line2 = "%.0f%%" % (cell.ratio * 100) if cell.ratio is not None else ""
                tip = "%s→%s: %s %s, expected %s" % (label, heat.labels[j], _f(cell.measured), heat.unit,
                                                      _f(cell.expected) if cell.expected else "unknown")
            body.append('<g class=%s><title>%s</title><rect x="%s" y="%s" width="%s" height="%s"/>'
                        '<text x="%s" y="%s">%s</text><text class="ratio" x="%s" y="%s">%s</text></g>'
                        % (_a("cell " + cls), _t(tip), _f(x), _f(y), _f(cw - 2), _f(ch - 2),
                           _f(x + cw / 2), _f(y + 16), _t(line1), _f(x + cw / 2), _f(y + 31), _t(line2)))
    body.append('<text class="axis" x="%s" y="%s">%s in %s; %% = measured / expected</text>'
                % (_f(left), _f(height - 8), _t(heat.title), _t(heat.unit)))
    return _svg(width, height, "p2p", title, body)
