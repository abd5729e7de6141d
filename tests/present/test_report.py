"""Structural tests of the HTML report: parse the page and check what a reader would see."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest
from support.sample_fleet import build_large_fleet, build_previous_fleet, build_sample_fleet

from orchestrator.present.report import write_report
from orchestrator.present.report.model import build_fleet_view
from orchestrator.store.history import RunNotFound, load_fleet
from tests.support.judged import judged
from tests.support.judged import report as render_report

VOID = {"meta", "link", "input", "br", "hr", "img", "col", "area", "base", "embed", "source", "track", "wbr"}


class Node:
    def __init__(self, tag: str, attrs: dict[str, str | None], parent: Node | None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Node] = []
        self.text_parts: list[str] = []

    @property
    def classes(self) -> set[str]:
        return set((self.attrs.get("class") or "").split())

    def text(self) -> str:
        return "".join(self.text_parts) + "".join(c.text() for c in self.children)

    def iter(self):
        yield self
        for c in self.children:
            yield from c.iter()

    def find_all(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[Node]:
        out = []
        for n in self.iter():
            if tag and n.tag != tag:
                continue
            if cls and cls not in n.classes:
                continue
            if any(n.attrs.get(k.replace("_", "-")) != v for k, v in attrs.items()):
                continue
            out.append(n)
        return out

    def by_id(self, ident: str) -> Node:
        found = [n for n in self.iter() if n.attrs.get("id") == ident]
        assert len(found) == 1, f"{len(found)} elements with id {ident!r}"
        return found[0]


class Page(HTMLParser):
    """A strict little tree builder: every end tag must close the innermost open element."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {}, None)
        self.cur = self.root
        self.errors: list[str] = []
        self.feed(html)
        self.close()
        if self.cur is not self.root:
            self.errors.append(f"unclosed <{self.cur.tag}>")

    def handle_starttag(self, tag, attrs):
        node = Node(tag, dict(attrs), self.cur)
        self.cur.children.append(node)
        if tag not in VOID:
            self.cur = node

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Node(tag, dict(attrs), self.cur))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if self.cur.tag != tag:
            self.errors.append(f"</{tag}> closes <{self.cur.tag}>")
            return
        self.cur = self.cur.parent or self.root

    def handle_data(self, data):
        self.cur.text_parts.append(data)


def parse(html: str) -> Node:
    page = Page(html)
    assert page.errors == [], page.errors[:5]
    return page.root


@pytest.fixture(scope="module")
def fleet():
    return build_sample_fleet()


@pytest.fixture(scope="module")
def html(fleet):
    return render_report(fleet, build_previous_fleet())


@pytest.fixture(scope="module")
def doc(html):
    return parse(html)


def host_section(doc: Node, name: str) -> Node:
    return doc.by_id(f"host-{name}")


def pictures(node: Node, kind: str) -> list[Node]:
    return [n for n in node.find_all("svg") if n.attrs.get("data-picture") == kind]


# ----------------------------------------------------------------------------------------------
# The fleet page


def test_sections_present(doc):
    for ident in ("summary", "broken", "classes", "outliers", "findings", "drift", "hosts"):
        doc.by_id(ident)
    assert doc.find_all("title")[0].text().startswith("fleetprobe report")


def test_no_drift_section_without_previous(fleet):
    doc = parse(render_report(fleet))
    assert not [n for n in doc.iter() if n.attrs.get("id") == "drift"]


def test_summary_counts_match_the_fleet(doc, fleet):
    """The summary is health first (the verdict's, adding up to the hosts), faults by severity,
    and the transport's outcomes as what they are."""
    result = judged(fleet)
    health = {n.attrs["data-health"]: int(n.find_all("div", cls="num")[0].text())
              for n in doc.find_all("div", cls="card") if n.attrs.get("data-health")}
    assert health == dict(Counter(h.health.state.value for h in result.hosts))
    assert sum(health.values()) == len(fleet["hosts"])
    faults = {n.attrs["data-severity"]: int(n.find_all("div", cls="num")[0].text())
              for n in doc.find_all("div", cls="card") if n.attrs.get("data-severity")}
    assert faults == {s: n for s, n in result.summary.faults.items()}
    spans = {n.attrs["data-outcome"]: int(n.text().split()[0])
             for n in doc.by_id("transport").iter() if n.attrs.get("data-outcome")}
    assert spans == dict(Counter(h["outcome"] for h in fleet["hosts"]))
    assert doc.by_id("host-count").text() == str(len(fleet["hosts"]))


def test_findings_table_has_one_row_per_finding_with_filter_keys(doc, fleet):
    rows = doc.by_id("findings-table").find_all("tr", cls="finding")
    assert len(rows) == len(fleet["findings"])
    assert Counter(r.attrs["data-severity"] for r in rows) == Counter(f["severity"] for f in fleet["findings"])
    assert {(r.attrs["data-id"], r.attrs["data-host"]) for r in rows} == \
        {(f["id"], f["host"]) for f in fleet["findings"]}
    classes = {h["name"]: h["class"] or "" for h in fleet["hosts"]}
    assert all(r.attrs["data-class"] == classes[r.attrs["data-host"]] for r in rows)
    # Worst first.
    ranks = [int(r.attrs["data-rank"]) for r in rows]
    assert ranks == sorted(ranks, reverse=True)
    filters = doc.by_id("finding-filters")
    assert {i.attrs["value"] for i in filters.find_all("input") if i.attrs.get("name") == "severity"} == \
        {"fail", "warn", "info"}
    assert {i.attrs["name"] for i in filters.find_all("input", type="search")} == {"id", "host", "class"}


def test_broken_hosts_say_why(doc):
    rows = doc.by_id("broken").find_all("tr")[1:]
    names = [r.find_all("td")[0].text() for r in rows]
    # Every host with a fail or warn finding or a bad outcome, fails first; gpu01 (info only) is not broken.
    assert names[:4] == ["a100-01", "a100-02", "gpu02", "gpu05"]
    assert set(names) == {"a100-01", "gpu02", "gpu05", "a100-02", "gpu03", "gpu04", "vm01"}
    gpu02 = rows[names.index("gpu02")].text()
    assert "NVLink link 7 of GPU3 is down" in gpu02


def test_classes_with_member_counts_and_outliers(doc, fleet):
    rows = doc.by_id("classes").find_all("tbody")[0].find_all("tr")
    table = {r.find_all("td")[0].text(): int(r.find_all("td")[2].text()) for r in rows}
    assert table == {"dgx-h100-8gpu": 4, "a100-pcie-4gpu": 2, "vm-a100-mig": 1, "unclassified": 1}
    outliers = doc.by_id("classes").find_all("tbody")[1].find_all("tr")
    assert [r.find_all("td")[0].text() for r in outliers] == ["gpu04"]
    assert "NIC1 path to GPU2: PIX" in outliers[0].text()


def test_drift_lists_new_findings_and_removed_host(doc):
    drift = doc.by_id("drift")
    assert "hosts removed: 1 — a100-03" in drift.text()
    new = drift.find_all("table", cls="drift-new")[0].find_all("tr")[1:]
    # gpu05 answered yesterday and is unreachable today: nothing was judged on it today, so its
    # findings are not "new" (the report used to key findings itself; it now reads verdict/drift.py,
    # and the reachability change below is what says it)
    assert sorted(r.find_all("td")[1].text() for r in new) == ["nvlink.link.down", "p2p.bandwidth.low"]
    changes = {(r.find_all("td")[0].text(), r.find_all("td")[1].text())
               for r in drift.find_all("table", cls="drift-changes")[0].find_all("tr")[1:]}
    assert ("gpu05", "host.unreachable") in changes


# ----------------------------------------------------------------------------------------------
# Per host


def test_host_sections_are_collapsed_and_grouped_by_class(doc):
    for name in ("gpu01", "gpu02", "gpu03", "gpu04", "a100-01", "a100-02", "vm01", "gpu05"):
        section = host_section(doc, name)
        assert section.tag == "details" and "open" not in section.attrs
    h100 = doc.by_id("class-dgx-h100-8gpu")
    assert {n.attrs["data-host"] for n in h100.find_all("details", cls="host")} == {"gpu01", "gpu02", "gpu03", "gpu04"}


def test_identity_and_gpu_table(doc):
    gpu02 = host_section(doc, "gpu02")
    ident = {r.find_all("th")[0].text(): r.find_all("td")[0].text() for r in gpu02.find_all("table", cls="kv")[0].find_all("tr")}
    assert ident["Board"] == "NVIDIA NVIDIA DGXH100"
    assert ident["BIOS"].startswith("American Megatrends")
    assert ident["Driver"] == "550.54.15"
    rows = gpu02.find_all("table", cls="gpus")[0].find_all("tbody")[0].find_all("tr")
    assert len(rows) == 8
    assert rows[3].find_all("td")[1].text() == "0000:5d:00.0"
    # columns by header: part number and VBIOS (the procurement list) sit between serial and memory
    heads = [th.text() for th in gpu02.find_all("table", cls="gpus")[0].find_all("th")]
    assert heads[4:8] == ["serial", "part number", "VBIOS", "memory"]
    assert rows[3].find_all("td")[heads.index("memory")].text() == "80 GiB"
    gpu03 = host_section(doc, "gpu03").find_all("table", cls="gpus")[0]
    degraded = gpu03.find_all("td", cls="degraded")
    assert [d.text() for d in degraded] == ["Gen4 x8 (max Gen5 x16)"]


def test_level_matrix_coloured_by_level(doc):
    table = host_section(doc, "gpu04").find_all("table", cls="levels")[0]
    cells = [td for td in table.find_all("td")]
    assert len(cells) == 12 * 12
    by_class = Counter(next(iter(td.classes)) for td in cells)
    assert by_class["lv-x"] == 12 and by_class["lv-nv"] == 56 and by_class["lv-pix"] == 4
    assert all(td.text() == "PIX" for td in cells if "lv-pix" in td.classes)


def test_one_svg_per_picture(doc):
    for name in ("gpu01", "gpu02", "gpu03", "gpu04", "a100-01", "a100-02"):
        section = host_section(doc, name)
        assert [len(pictures(section, k)) for k in ("nvlink", "pcie", "p2p")] == [1, 1, 1], name
    vm = host_section(doc, "vm01")  # MIG VM: no NVLink facts, p2p skipped
    assert [len(pictures(vm, k)) for k in ("nvlink", "pcie", "p2p")] == [0, 1, 0]
    assert not host_section(doc, "gpu05").find_all("svg")  # unreachable: nothing to draw


def test_nvlink_graph_shows_the_down_link(doc):
    svg = pictures(host_section(doc, "gpu02"), "nvlink")[0]
    nodes = svg.find_all("g", cls="node")
    assert len(nodes) == 12  # 8 GPUs + 4 NVSwitches
    down_nodes = [n for n in nodes if "node-down" in n.classes]
    assert [n.find_all("text")[0].text() for n in down_nodes] == ["GPU3"]
    assert down_nodes[0].find_all("text")[1].text() == "17/18 up"
    stubs = svg.find_all("g", cls="edge-down")
    assert len(stubs) == 1 and stubs[0].attrs["data-down"] == "1"
    edges = [g for g in svg.find_all("g", cls="edge") if "stub" not in g.classes]
    assert len(edges) == 32  # every GPU to every switch
    assert sum(int(e.find_all("text")[0].text()) for e in edges) == 143
    healthy = pictures(host_section(doc, "gpu01"), "nvlink")[0]
    assert not healthy.find_all("g", cls="edge-down") and not healthy.find_all("g", cls="node-down")
    assert "1 link down" in host_section(doc, "gpu02").find_all("figure", cls="fig-nvlink")[0].text()


def test_nvlink_bridge_pairs_drawn_without_switches(doc):
    svg = pictures(host_section(doc, "a100-01"), "nvlink")[0]
    assert len(svg.find_all("g", cls="node-gpu")) == 4 and not svg.find_all("g", cls="node-nvswitch")
    edges = svg.find_all("g", cls="edge")
    assert sorted(e.find_all("text")[0].text() for e in edges) == ["12", "12"]  # each bond once, not twice
    # A bridge link down, seen from both GPUs: one red bond, both GPUs at 11/12.
    svg = pictures(host_section(doc, "a100-02"), "nvlink")[0]
    down = svg.find_all("g", cls="edge-down")
    assert [e.find_all("text")[0].text() for e in down] == ["12 (1 down)"]
    assert sorted(n.find_all("text")[0].text() for n in svg.find_all("g", cls="node-down")) == ["GPU2", "GPU3"]
    assert {n.find_all("text")[1].text() for n in svg.find_all("g", cls="node-down")} == {"11/12 up"}
    assert "1 link down" in host_section(doc, "a100-02").find_all("figure", cls="fig-nvlink")[0].text()


def test_pcie_tree_highlights_shared_uplink_and_downgrade(doc):
    svg = pictures(host_section(doc, "gpu04"), "pcie")[0]
    shared = svg.find_all("g", cls="dev-shared")
    assert [g.attrs["data-bdf"] for g in shared] == ["0000:36:00.0"]
    assert "uplink shared: GPU2, GPU3, NIC1" in shared[0].text()
    assert sorted(g.attrs["data-bdf"] for g in svg.find_all("g", cls="dev-sharer")) == \
        ["0000:3a:00.0", "0000:3d:00.0", "0000:5d:00.0"]
    # Switch ports are folded into their switch; the SMBus controller is not drawn.
    bdfs = {g.attrs["data-bdf"] for g in svg.find_all("g", cls="dev")}
    assert "0000:37:00.0" not in bdfs and "0000:00:1f.4" not in bdfs
    assert len(svg.find_all("g", cls="dev-gpu")) == 8 and len(svg.find_all("g", cls="dev-nic")) == 4
    assert len(svg.find_all("g", cls="dev-switch")) == 4 and len(svg.find_all("g", cls="dev-nvswitch")) == 4
    other = pictures(host_section(doc, "gpu01"), "pcie")[0]
    assert not other.find_all("g", cls="dev-shared") and not other.find_all("g", cls="dev-downgraded")
    downgraded = pictures(host_section(doc, "gpu03"), "pcie")[0].find_all("g", cls="dev-downgraded")
    assert [g.attrs["data-bdf"] for g in downgraded] == ["0000:ab:00.0"]


def test_p2p_heat_map_ratio_cells(doc, fleet):
    svg = pictures(host_section(doc, "gpu02"), "p2p")[0]
    cells = svg.find_all("g", cls="cell")
    assert len(cells) == 64
    bad = [c for c in cells if "hm-bad" in c.classes]
    assert len(bad) == 14  # GPU3's row and column
    assert len([c for c in cells if "hm-none" in c.classes]) == 8  # the diagonal
    # Expected is the H100 NVLink P2P floor, 335 GB/s (the finding's own value for GPU3->GPU0).
    measured = fleet["hosts"][1]["facts"]["p2p"]["matrices"]["ce_gbps"]
    texts = {(c.find_all("text")[0].text(), c.find_all("text")[1].text()) for c in bad}
    assert (f"{measured[3][0]:g}", f"{measured[3][0] / 335 * 100:.0f}%") in texts
    assert (f"{measured[0][3]:g}", f"{measured[0][3] / 335 * 100:.0f}%") in texts
    good = [c for c in cells if "hm-good" in c.classes]
    assert len(good) == 64 - 14 - 8
    # A100 PCIe cards: NV12 bridge pairs judged against 60% of 12 x 25 GB/s, the other pairs
    # (through the CPU, SYS) against half of PCIe Gen4 x16.
    a100 = pictures(host_section(doc, "a100-01"), "p2p")[0].find_all("g", cls="cell")
    tips = [c.find_all("title")[0].text() for c in a100]
    m = fleet["hosts"][4]["facts"]["p2p"]["matrices"]["ce_gbps"]
    assert f"GPU0→GPU1: {m[0][1]:g} GB/s, expected 180" in tips
    assert any(t.startswith("GPU0→GPU2: ") and t.endswith("expected 15.8") for t in tips)
    assert Counter(next(x for x in c.classes if x.startswith("hm-")) for c in a100) == {"hm-none": 4, "hm-good": 12}


# ----------------------------------------------------------------------------------------------
# Scale behaviour, safety, input errors


def test_healthy_members_are_rows_and_pictures_only_for_troubled_and_representatives():
    fleet = build_large_fleet(60, broken_every=25)
    view = build_fleet_view(judged(fleet))
    detailed = sorted(h.name for c in view.classes for h in c.hosts if h.detailed)
    assert detailed == sorted({c.representative for c in view.classes} | {"node00000", "node00025", "node00050"})
    doc = parse(render_report(fleet))
    assert len(doc.find_all("details", cls="host")) == len(detailed)
    member_rows = sum(len(t.find_all("tbody")[0].find_all("tr")) for t in doc.find_all("table", cls="members"))
    assert member_rows == 60 - len(detailed)
    # Three broken H100 hosts and the H100 and A100 representatives (the MIG VM has no NVLink).
    assert len([p for d in doc.find_all("details", cls="host") for p in pictures(d, "nvlink")]) == 3 + 2
    # and each class's shape with the class (issue 49), drawn from its representative
    assert len([p for d in doc.find_all("div", cls="class-head") for p in pictures(d, "nvlink")]) == 2


def test_picture_cap_is_reported():
    fleet = build_large_fleet(200, broken_every=10)  # 20 troubled hosts
    doc = parse(render_report(fleet, max_pictures=8))
    assert len(doc.find_all("details", cls="host")) == 8
    assert "pictures capped: 15 more troubled hosts" in doc.by_id("hosts").text()


def test_self_contained_with_strict_csp(html, doc):
    for n in doc.iter():
        for key in ("src", "href", "action", "data", "poster"):
            value = n.attrs.get(key)
            if value is not None:
                assert value.startswith("#") or value.startswith("data:"), (n.tag, key, value)
        assert not (n.tag == "link" and n.attrs.get("rel") == "stylesheet")
    meta = next(m for m in doc.find_all("meta") if m.attrs.get("http-equiv") == "Content-Security-Policy")
    csp = meta.attrs["content"]
    assert "default-src 'none'" in csp
    scripts = doc.find_all("script")
    assert len(scripts) == 1 and "src" not in scripts[0].attrs
    digest = base64.b64encode(hashlib.sha256(scripts[0].text().encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in csp


HOSTILE = ("<script>alert(1)</script>\"'><img src=x onerror=alert(2)></svg></details><script>alert(3)</script>"
           "{{ 7*7 }}&amp;\u202egnp.exe\u200b\u2066\x00\x07\x1b[31m\x85\u2028")


def _shape(doc: Node) -> Counter:
    """Every element as (tag, attribute names): what markup the page is made of."""
    # <wbr> is the report's own line-break opportunity after separators (render.breakable): a
    # payload with more dots and dashes gets more of them, and they carry no attribute.
    return Counter((n.tag, tuple(sorted(n.attrs))) for n in doc.iter() if n.tag != "wbr")


def test_hostile_strings_stay_text_everywhere():
    benign = build_sample_fleet(hostile="")
    hostile = build_sample_fleet(hostile=HOSTILE)
    html = render_report(hostile, copy.deepcopy(hostile))
    doc = parse(html)
    # The payload added no element and no attribute anywhere: same markup as a plain fleet.
    assert _shape(doc) == _shape(parse(render_report(benign, copy.deepcopy(benign))))
    assert html.count("<script") == 1
    assert "<img" not in html  # the payload's onerror= survives only as text, checked below
    assert all(not k.startswith("on") for n in doc.iter() for k in n.attrs)
    text = doc.text()
    # Shown as text, with invisible and direction-changing characters made visible.
    assert "<script>alert(1)</script>\"'><img src=x onerror=alert(2)>" in text
    assert "\\u202egnp.exe\\u200b\\u2066\\u0000\\u0007\\u001b[31m\\u0085\\u2028" in text
    for bad in ("\u202e", "\u200b", "\u2066", "\x00", "\x07", "\x1b", "\u2028"):
        assert bad not in html
    # Template syntax in data is not evaluated.
    assert "{{ 7*7 }}" in text
    # Anchors built from hostile host names are plain ids that still resolve.
    ids = [n.attrs["id"] for n in doc.iter() if "id" in n.attrs]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[A-Za-z0-9_-]+", i) for i in ids)
    hrefs = {n.attrs["href"][1:] for n in doc.find_all("a") if n.attrs.get("href", "").startswith("#")}
    assert hrefs <= set(ids)


def test_hostile_strings_in_svg_are_escaped():
    from orchestrator.present.report import svg
    from orchestrator.present.report.model import GraphNode, NvlinkGraph, PcieNode

    graph = NvlinkGraph([GraphNode("a", HOSTILE, "gpu", 1, 1, 1), GraphNode("b", "<b>", "gpu", 1, 0, 0)], [])
    tree = [PcieNode("0000:00:01.0", "root_port", HOSTILE, HOSTILE, HOSTILE, True, True, HOSTILE)]
    for out in (svg.nvlink_svg(graph, HOSTILE), svg.pcie_svg(tree, HOSTILE)):
        doc = parse(out)
        assert [n.tag for n in doc.iter()].count("script") == 0 and "<img" not in out
        assert HOSTILE[:26] in doc.text()


def test_garbage_facts_render_without_crashing(fleet):
    broken = copy.deepcopy(fleet)
    broken["hosts"][0]["facts"] = {"gpus": "nonsense", "nvlink": {"gpus": [None, 3, {"links": [None, {"remote_bus_id": 5}]}]},
                                   "pcie": {"devices": [1, None, {"bdf": "x", "parent": "x"}], "uplinks": [None]},
                                   "topology": {"devices": [{"name": "GPU0"}], "matrix": "no"},
                                   "p2p": {"tests": {"ce_unidir": {"bandwidth": [[None, "x"], 7]}}}}
    broken["hosts"][1]["probes"] = None
    broken["findings"].append({"id": None, "severity": "catastrophic"})
    broken["classes"].append("not a class")
    parse(render_report(broken, {"hosts": "nope"}))


def test_write_report_is_atomic_and_reads_run_dirs(tmp_path: Path, fleet):
    run = tmp_path / "run1"
    run.mkdir()
    (run / "fleet.json").write_text(json.dumps(fleet))
    out = write_report(judged(load_fleet(run)), tmp_path / "out" / "report.html")
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert [p.name for p in out.parent.iterdir()] == ["report.html"]


@pytest.mark.parametrize("content, message", [
    (None, "no fleet.json"),
    ("{not json", "not valid JSON (Expecting property name"),
    ("[1, 2]", "not a JSON object"),
    ('{"hosts": {}}', "its hosts are not a list"),
])
def test_load_fleet_errors_are_one_line(tmp_path: Path, content, message):
    """The one reader of a stored fleet.json (store/history.py) that the report and every other
    surface go through: one line that says what is wrong and what to do."""
    path = tmp_path / "fleet.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(RunNotFound) as err:
        load_fleet(tmp_path)
    assert message in str(err.value) and "\n" not in str(err.value) and "rejudge" in str(err.value)


@pytest.mark.parametrize("hostile", ['"; } body { display: none } @page { content: "', "</style><script>alert(1)</script>",
                                     "a\\\" b", "run\n\r\x00\u202e", "ünïcode · run"])
def test_the_running_header_is_a_css_string_nothing_can_end(hostile):
    """Issue 49: the printed pages' header carries the run id and playbook inside the stylesheet;
    every character that could end the string, the rule or the <style> element is escaped."""
    from orchestrator.present.report.render import _css_string

    text = _css_string(hostile)
    inner = text[1:-1]
    assert text[0] == text[-1] == '"' and not re.search(r'["<>{};\n\r\x00/]', inner)
    # and it reads back as the same text: each escape is \HHHHHH of one character
    assert re.sub(r"\\([0-9a-f]{6})", lambda m: chr(int(m.group(1), 16)), inner) == hostile
