"""Render a judged fleet as one self-contained HTML page.

`render_report(fleet, drift)` is pure (the verdict's FleetResult and drift in, str out);
`write_report` adds the atomic file write, for `probe report` and `probe run --html`.

Safety: Jinja2 autoescaping is on for every template, host data is never marked safe.  The only
strings inserted as Markup are our stylesheet, our script and the SVG from `svg.py` (which
escapes every string it emits).  A Content-Security-Policy allows no network access at all and
only the page's own script (by hash), so even a markup bug could not run injected code.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup, escape

from orchestrator.facts.textsafe import display_safe
from orchestrator.present.report import svg
from orchestrator.present.report.model import (
    FleetView,
    HostPage,
    build_fleet_view,
    class_health,
    hint_groups,
    level_class,
)
from orchestrator.store import atomic
from orchestrator.verdict.changes import FleetDiff
from orchestrator.verdict.findings import SEVERITY_ORDER, severity_rank
from orchestrator.verdict.health import HEALTH_ORDER
from orchestrator.verdict.result import FleetResult

TEMPLATES = Path(__file__).with_name("templates")
IDENTITY_KEYS = ("Board", "BIOS", "Driver")
# Detailed host sections (with pictures) at most; ~45 KB each for an 8-GPU host.  The troubled
# hosts past the cap stay in the findings table and their class's member table.
MAX_PICTURES = 100


class ReportError(Exception):
    """A report could not be produced; the message is one line a person can act on."""


# after : _ / , and - (not the - of an arrow "->"); after a dot only before two more letters or
# digits ("00.0" stays whole)
_AFTER_SEPARATOR = re.compile(r"(?<=[:_/,])|(?<=-)(?!>)|(?<=\.)(?=[0-9A-Za-z]{2})")
# never broken: a PCI bus id, and a pair with its arrow ("GPU0->GPU1", "GPU3<->GPU5", "GPU0→GPU1")
_WHOLE = re.compile(r"([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
                    r"|[\w?]+\s?(?:<->|->|<-|→|←|↔)\s?[\w?]+)")


def breakable(value: Any) -> Markup:
    """Text (escaped) with a line-break opportunity after each separator of ids, class and host
    names (`.`, `:`, `_`, `/`, `,`, `-`), PCI bus ids and GPU pairs with their arrow kept whole, so
    a narrow column wraps there and never in the middle of "0000:3a:00.0", "GPU0->GPU1" or
    "bandwidth" (the cells' CSS breaks a word only when it cannot fit a line of its own)."""
    out: list[Markup] = []
    for i, piece in enumerate(_WHOLE.split(str(value))):
        if i % 2:
            out.append(escape(piece))
        else:
            out.append(Markup("<wbr>").join(escape(part) for part in _AFTER_SEPARATOR.split(piece)))
    return Markup("").join(out)


def _finalize(value: Any) -> Any:
    return display_safe(value) if isinstance(value, str) and not hasattr(value, "__html__") else value


@lru_cache(maxsize=1)
def _environment() -> Environment:
    # finalize: every value a template prints loses the characters no reader should get from a
    # host (controls, bidi overrides, zero-width); autoescape then makes it HTML text
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=False, lstrip_blocks=False, finalize=_finalize)
    env.globals["level_class"] = level_class
    env.globals["hint_groups"] = hint_groups
    env.globals["class_health"] = class_health
    env.globals["health_rank"] = lambda h: HEALTH_ORDER.index(h) if h in HEALTH_ORDER else len(HEALTH_ORDER)
    env.filters["breakable"] = breakable
    return env


@lru_cache(maxsize=1)
def _static() -> tuple[str, str]:
    return (TEMPLATES / "report.css").read_text(encoding="utf-8"), (TEMPLATES / "report.js").read_text(encoding="utf-8")


def _csp_hash(text: str) -> str:
    return "'sha256-{}'".format(base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii"))


def _pictures(page: HostPage) -> dict[str, Markup]:
    pics: dict[str, Markup] = {}
    if not page.detailed:
        return pics
    # Markup here is sound: svg.py escapes every string it writes (tested with hostile payloads).
    if page.nvlink is not None and any(n.links for n in page.nvlink.nodes):
        pics["nvlink"] = Markup(svg.nvlink_svg(page.nvlink, f"NVLink graph of {page.name}"))
    if page.p2p is not None:
        pics["p2p"] = Markup(svg.p2p_svg(page.p2p, f"P2P bandwidth of {page.name}"))
    if page.pcie:
        pics["pcie"] = Markup(svg.pcie_svg(page.pcie, f"PCIe tree of {page.name}"))
    return pics


def _class_pictures(view: FleetView, pictures: dict[str, dict[str, Markup]],
                    anchors: dict[str, str]) -> dict[str, dict[str, Markup]]:
    """class anchor -> its health chart and its topology pictures (NVLink graph, PCIe tree with the
    GPU-NIC placement), drawn from its representative: what every member's shape is."""
    out: dict[str, dict[str, Markup]] = {}
    for c in [*view.classes, *(fc for top in view.classes for fc in top.fault_classes)]:
        pics = {k: v for k, v in pictures.get(anchors.get(c.representative, ""), {}).items() if k in ("nvlink", "pcie")}
        out[c.anchor] = {"health": Markup(svg.health_svg(c.health, f"hosts of {c.name} by health")), **pics}
    return out


def _pages(view: FleetView) -> list[HostPage]:
    """Every host's page: the classes', their fault classes' and the unclassified."""
    return [h for c in view.classes for v in (c, *c.fault_classes) for h in v.hosts] + view.unclassified


def run_line(view: FleetView) -> str:
    """What every printed page says in its running header: the run, its date, its playbook."""
    return " · ".join(x for x in (f"fleetprobe run {view.run_id}", view.started[:10],
                                  f"playbook {view.playbook}" if view.playbook else "") if x)


def _css_string(text: str) -> str:
    """Text as a CSS string literal: every character but letters, digits, space and . : - _ escaped
    (\\HHHHHH), so no host- or run-supplied value can end the string, the rule or the <style>."""
    return '"' + "".join(c if c.isascii() and (c.isalnum() or c in " .:-_") else f"\\{ord(c):06x}" for c in text) + '"'


def _broken(view: FleetView) -> list[HostPage]:
    """Hosts that are not healthy, worst health first (the verdict's health)."""
    broken = [h for h in _pages(view) if h.health != "healthy"]
    return sorted(broken, key=lambda h: (HEALTH_ORDER.index(h.health) if h.health in HEALTH_ORDER else 0, h.name))


def render_report(fleet: FleetResult, drift: FleetDiff | None = None, max_pictures: int = MAX_PICTURES) -> str:
    """The HTML report of a judged fleet (and its drift since a baseline, as the verdict computed it)."""
    from orchestrator import __version__

    view = build_fleet_view(fleet, drift, max_pictures=max_pictures)
    pages = _pages(view)
    anchors = {h.name: h.anchor for h in pages}
    pictures = {h.anchor: _pictures(h) for h in pages}
    css, js = _static()
    # the run on every printed page (Chromium draws @page margin boxes since 131); generated here,
    # hashed with the rest of the stylesheet, its text a CSS string that cannot end the rule
    css += "\n@page { @top-left { content: " + _css_string(run_line(view)) + "; } }\n"
    csp = "; ".join([
        "default-src 'none'", "img-src data:", f"style-src {_csp_hash(css)}", f"script-src {_csp_hash(js)}",
        "base-uri 'none'", "form-action 'none'"])
    return _environment().get_template("report.html.j2").render(
        v=view, version=__version__, css=Markup(css), js=Markup(js), csp=csp,
        anchors=anchors, pictures=pictures, class_pictures=_class_pictures(view, pictures, anchors),
        every_host=sorted(pages, key=lambda h: h.name), run_line=run_line(view),
        broken=_broken(view), rank={s: severity_rank(s) for s in SEVERITY_ORDER}, identity_keys=IDENTITY_KEYS)


def write_report(fleet: FleetResult, out: str | os.PathLike[str], drift: FleetDiff | None = None,
                 max_pictures: int = MAX_PICTURES) -> Path:
    """Render and write atomically (temp file + rename), so a reader never sees half a page."""
    html = render_report(fleet, drift, max_pictures=max_pictures)
    return atomic.write_output(Path(out), html)
