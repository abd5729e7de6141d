"""A half-readable file (issue 48 item 1): a file of a recognised kind cut or garbled before it
states any fact is named in `probe import`'s exit code (3, HALF_READABLE) and its message says
which command's whole output to paste instead.  The class is built by cutting real published
outputs (tests/fixtures/evidence, tests/fixtures/text: provenance in their SOURCES files) at every
place above their first GPU: the default screen above its first GPU row, `-q` above its first GPU
block, `-q -x` anywhere before its closing tag.  A file that is simply not command output keeps
exit 4; fail findings elsewhere keep exit 1 / 5 (nothing worse is hidden behind 3).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator.cli.exitcodes import ExitStatus
from orchestrator.cli.main import main
from orchestrator.facts.textparse import parse_text
from orchestrator.facts.textparse.common import HalfReadable
from tests.support.evidence import EVIDENCE

TEXT = Path(__file__).resolve().parents[1] / "fixtures" / "text"
SCREENS = sorted(EVIDENCE.glob("smi_screen_*.txt"))
QUERIES = [*sorted(EVIDENCE.glob("q_*.txt")), TEXT / "h200_real_q.txt"]
XMLS = [TEXT / "h200_real_q_x.xml", TEXT / "smi_qx_2x_a100_mig_passthrough.xml"]


def _screen_heads() -> list[tuple[str, str]]:
    """Each real screen cut after its banner, after its column header, and after the `===` line:
    the lines above its first GPU row (screens without a banner, or led by a lost GPU, are skipped)."""
    out = []
    for f in SCREENS:
        lines = f.read_text(errors="replace").splitlines(keepends=True)
        first_row = next((i for i, ln in enumerate(lines) if re.match(r"^\W*\|\s+\d+\s+\S", ln)), None)
        banner = next((i for i, ln in enumerate(lines) if "NVIDIA-SMI" in ln), None)
        if first_row is None or banner is None or banner > first_row or any(
                "Unable to determine" in ln or "No devices" in ln for ln in lines):
            continue
        for end in sorted({banner + 1, max(banner + 1, first_row - 1), first_row}):
            out.append((f"{f.name}[:{end}]", "".join(lines[:end])))
    return out


def _query_heads() -> list[tuple[str, str]]:
    out = []
    for f in QUERIES:
        text = f.read_text(errors="replace")
        m = re.search(r"^GPU [0-9A-Fa-f]+:", text, re.M)
        assert m, f
        out.append((f"{f.name}[:first block]", text[:m.start()]))
    return out


def _xml_cuts() -> list[tuple[str, str]]:
    out = []
    for f in XMLS:
        text = f.read_text()
        end = text.index("</nvidia_smi_log>")
        for frac in (0.2, 0.5, 0.9):
            cut = text.index("\n", int(end * frac)) + 1
            out.append((f"{f.name}[:{frac}]", text[:cut]))
    return out


CASES = [*_screen_heads(), *_query_heads(), *_xml_cuts()]


def _import(tmp_path: Path, capsys: pytest.CaptureFixture[str], *texts: tuple[str, str]) -> tuple[int, str]:
    paths = []
    for i, (name, text) in enumerate(texts):
        p = tmp_path / f"host.{i}.{re.sub(r'[^A-Za-z0-9_]', '_', name)[:60]}.txt"
        p.write_text(text)
        paths.append(str(p))
    rc = main(["import", *paths, "--results", str(tmp_path / "runs"), "--host", "h"])
    return rc, capsys.readouterr().out


def test_the_class_is_large_and_spans_the_three_formats() -> None:
    assert len(_screen_heads()) >= 40 and len(_query_heads()) >= 4 and len(_xml_cuts()) >= 6


@pytest.mark.parametrize(("name", "text"), CASES, ids=[c[0] for c in CASES])
def test_every_half_readable_file_is_refused_as_such_naming_the_command_to_paste(name: str, text: str) -> None:
    with pytest.raises(HalfReadable) as e:
        parse_text(text, name)
    assert "half-readable" in str(e.value) and f"paste {e.value.paste} instead" in str(e.value)
    assert "nvidia-smi -q" in e.value.paste and "None" not in str(e.value)


# one of each format and cut place through the whole command (an import costs seconds)
CLI_CASES = [CASES[0], CASES[2], *_query_heads()[:2], *_xml_cuts()[::3]]


@pytest.mark.parametrize(("name", "text"), CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_a_half_readable_file_alone_exits_3_and_names_the_command_to_paste(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str) -> None:
    rc, out = _import(tmp_path, capsys, (name, text))
    assert rc == ExitStatus.HALF_READABLE == 3, out
    assert "half-readable" in out and re.search(r"paste (the whole )?`nvidia-smi -q", out), out
    assert "None" not in out and "Traceback" not in out


@pytest.mark.parametrize("cut", [CASES[0], _query_heads()[0], _xml_cuts()[0]], ids=["screen", "q", "xml"])
def test_beside_a_good_file_the_host_is_judged_and_the_exit_code_still_names_the_cut_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], cut: tuple[str, str]) -> None:
    good = (TEXT / "h200_real_L.txt").read_text()
    rc, out = _import(tmp_path, capsys, cut, ("L", good))
    assert rc == 3, out
    assert "half-readable" in out and "smi_list" in out


def test_an_unreadable_file_is_not_half_readable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Not command output at all, or a half-readable file beside one: exit 4 as before."""
    for texts in ([("junk", "hello world\nnothing here\n")], [CASES[0], ("junk", "hello\n")]):
        rc, _ = _import(tmp_path, capsys, *texts)
        assert rc == ExitStatus.HOSTS_FAILED, texts


def test_a_whole_q_with_no_gpu_attached_is_not_half_readable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (TEXT / "h200_real_q.txt").read_text()
    head = text[:re.search(r"^GPU [0-9A-Fa-f]+:", text, re.M).start()]  # type: ignore[union-attr]
    rc, out = _import(tmp_path, capsys, ("q0", re.sub(r"(Attached GPUs\s*:\s*)\d+", r"\g<1>0", head)))
    assert rc != 3 and "half-readable" not in out, out


def test_fail_findings_are_not_hidden_behind_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A fail finding (here: an expectation the host misses) keeps exit 1."""
    good = (TEXT / "h200_real_L.txt").read_text()
    paths = []
    for i, (name, text) in enumerate([CASES[0], ("L", good)]):
        p = tmp_path / f"host.{i}.{name[:20].replace('[', '_').replace(':', '_').replace(']', '_')}.txt"
        p.write_text(text)
        paths.append(str(p))
    rc = main(["import", *paths, "--results", str(tmp_path / "runs"), "--host", "h", "--expect", "gpu_count=8"])
    out = capsys.readouterr().out
    assert rc == ExitStatus.FINDINGS_FAIL, out
