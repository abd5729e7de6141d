"""Raw mode flags a half-readable command output the way `probe import` does (issue 48): the same
one-line message naming the command to paste (run) whole, `paste` on the file's record, and the file
listed under `half_readable`.  The class: two real `-q -x` cut at 20/50/90 % (through stand-in
`nvidia-smi` subprocesses like the raw-mode end-to-end test, and directly), a real default screen cut
above its first GPU row and a real `-q` cut above its first block, each beside a good `topo -m`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.facts.normalize import normalize_host
from orchestrator.facts.textparse import RAW_COMMANDS, facts_from_raw_outputs, import_texts, read_path
from tests.cli.test_import_half_readable import _query_heads, _screen_heads, _xml_cuts
from tests.facts.test_textparse_common import FIXTURES
from tests.facts.test_textparse_raw import run_raw, stand_ins

TOPO = read_path(FIXTURES / "h200_real_topo_m.txt").encode()
CUTS = [("smi_query_xml", *c) for c in _xml_cuts()] + [
    ("smi_screen", *_screen_heads()[0]), ("smi_screen", *_screen_heads()[-1]), ("smi_query", *_query_heads()[0])]


def _flagged_like_import(res: dict, kind: str, text: str) -> None:
    src = RAW_COMMANDS.get(kind, kind)
    imported = import_texts([(src, text)], kind).files[0]
    assert imported.paste and not imported.ok
    [rec] = [f for f in res["files"] if f["source"] == src]
    assert rec == imported.to_dict() and rec["paste"] == imported.paste, rec
    assert res["half_readable"] == [rec] and res["errors"] == [imported.error]
    assert "half-readable" in rec["error"] and f"paste {rec['paste']} instead" in rec["error"]
    assert res["facts"]["gpus"]["count"] == 1  # the good topo -m beside it still counts


@pytest.mark.parametrize(("kind", "name", "text"), CUTS, ids=[f"{c[0]}:{c[1]}" for c in CUTS])
def test_a_half_readable_raw_output_is_flagged_like_an_imported_file(kind: str, name: str, text: str) -> None:
    _flagged_like_import(facts_from_raw_outputs({kind: text.encode(), "topo_matrix": TOPO}), kind, text)


def test_a_cut_q_x_from_a_real_subprocess_is_flagged_and_reaches_the_hosts_errors(tmp_path: Path) -> None:
    _, text = _xml_cuts()[1]
    cut = tmp_path / "cut.xml"
    cut.write_text(text)
    stand_ins(tmp_path, {"-q -x": cut, "topo -m": FIXTURES / "h200_real_topo_m.txt"}, {})
    outputs = run_raw(tmp_path)
    assert outputs["smi_query_xml"] == text.encode()
    res = facts_from_raw_outputs(outputs)
    _flagged_like_import(res, "smi_query_xml", text)
    facts, errors = normalize_host({"raw": {"outputs": {k: v.decode() if v else None for k, v in outputs.items()}}})
    assert f"raw: {res['half_readable'][0]['error']}" in errors and facts["gpus"]["count"] == 1


def test_whole_outputs_are_not_half_readable() -> None:
    xml = read_path(FIXTURES / "h200_real_q_x.xml").encode()
    res = facts_from_raw_outputs({"smi_query_xml": xml, "topo_matrix": TOPO})
    assert res["half_readable"] == [] and res["errors"] == [] and all("paste" not in f for f in res["files"])
