"""AER counters in sysfs (issue 18): the sysfs builder writes aer_dev_* in the kernel's format, the
pcie probe reads them without root, the normalizer gives each link of a GPU's or NIC's upstream
chain the counts of both its ends, and the check judges fatal errors as absolutes and correctable /
non-fatal ones as growth between two runs of one boot (a reboot in between: nothing compared)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.facts.normalize.pcie import normalize
from orchestrator.simulate import build_machine
from orchestrator.verdict.checks import health
from orchestrator.verdict.checks.base import HostView
from orchestrator.verdict.coverage import not_judged
from tests.facts.test_pcie import run_probe

GPU0, DSP0, USP0 = "0000:18:00.0", "0000:17:00.0", "0000:16:00.0"


def _with_aer(aer: dict[str, dict[str, Any]], **top: Any) -> dict[str, Any]:
    """dgx-h100 with AER counts on some devices (a description with `base:` and `patch:`)."""
    return {"name": "dgx-h100-aer", "base": "dgx-h100", **top,
            "patch": [{"bdf": bdf, "set": {"aer": counts}} for bdf, counts in aer.items()]}


def _facts(tmp: Path, name: str, desc: dict[str, Any]) -> dict[str, Any]:
    env = run_probe(build_machine(desc, tmp / name))
    assert env["status"] == "ok", env["errors"]
    return dict(normalize(env["data"]))


def _view(pcie: dict[str, Any], boot: str = "b1", previous: dict[str, Any] | None = None) -> HostView:
    return HostView(name="h", facts={"pcie": pcie, "kmsg": {"boot_id": boot}}, outcomes={"pcie": "ok"},
                    previous=previous)


def test_kernel_file_format_is_read_and_both_link_ends_counted(tmp_path: Path) -> None:
    root = build_machine(_with_aer({}), tmp_path / "plain")
    text = (root / "sys/bus/pci/devices" / GPU0 / "aer_dev_correctable").read_text().splitlines()
    assert text[0] == "RxErr 0" and text[-1] == "TOTAL_ERR_COR 0"
    assert (root / "sys/bus/pci/devices" / GPU0 / "aer_dev_fatal").read_text().splitlines()[-1] == "TOTAL_ERR_FATAL 0"
    # errors counted at the link partner (the switch's downstream port above GPU0) belong to GPU0's link
    facts = _facts(tmp_path, "aer", _with_aer({DSP0: {"correctable": {"RxErr": 7, "BadTLP": 2}}, GPU0: {"correctable": {"BadDLLP": 1}}}))
    link = next(lk for lk in facts["aer_links"] if lk["device"] == GPU0)
    assert (link["partner"], link["correctable"], link["fatal"]) == (DSP0, 10, 0)
    assert (link["gen_current"], link["width_current"]) == (5, 16)
    # each end lists the counters that counted (the kernel's TOTAL line among them), the device first
    assert link["ends"] == [{"device": GPU0, "correctable": {"BadDLLP": 1, "TOTAL_ERR_COR": 1}, "nonfatal": {}, "fatal": {}},
                            {"device": DSP0, "correctable": {"BadTLP": 2, "RxErr": 7, "TOTAL_ERR_COR": 9},
                             "nonfatal": {}, "fatal": {}}]
    # the switch's own uplink is on GPU0's chain too, serving both GPUs (and the NIC) behind the switch
    up = next(lk for lk in facts["aer_links"] if lk["device"] == USP0)
    assert GPU0 in up["serves"] and up["partner"] is not None


def test_fatal_is_absolute_and_correctable_a_rate_within_one_boot(tmp_path: Path) -> None:
    clean = _facts(tmp_path, "clean", _with_aer({}))
    assert list(health.aer_counters(_view(clean))) == []
    fatal = _facts(tmp_path, "fatal", _with_aer({DSP0: {"fatal": {"CmpltTO": 1}}}))
    [f] = health.aer_counters(_view(fatal))
    assert (f.id, f.severity.value) == ("pcie.aer.counters", "fail") and f.subject.startswith(GPU0)
    # 40 correctable errors since boot: no finding without a previous run (since-boot noise) ...
    noisy = _facts(tmp_path, "noisy", _with_aer({DSP0: {"correctable": {"RxErr": 40}}}))
    assert list(health.aer_counters(_view(noisy))) == []
    # ... and growth of 40 since the previous run of the same boot is a warning
    [g] = health.aer_counters(_view(noisy, previous={"pcie": clean, "kmsg": {"boot_id": "b1"}}))
    assert g.severity.value == "warn" and "correctable +40" in g.message and "Gen5 x16" in g.subject
    # a reboot between the runs: the counters restarted, nothing to compare
    assert list(health.aer_counters(_view(noisy, previous={"pcie": clean, "kmsg": {"boot_id": "b0"}}))) == []


def test_without_aer_files_the_check_is_not_judged(tmp_path: Path) -> None:
    old_kernel = _facts(tmp_path, "old", _with_aer({}, aer_files=False))
    assert old_kernel["aer_links"] == []
    why = not_judged({"pcie": old_kernel}, {"pcie": "ok"}, {})
    assert "no AER counters" in why["pcie.aer.counters"]
    clean = _facts(tmp_path, "clean2", _with_aer({}))
    assert "pcie.aer.counters" not in not_judged({"pcie": clean}, {"pcie": "ok"}, {})


def test_correctable_growth_is_judged_against_the_links_width_and_speed(tmp_path: Path) -> None:
    """The same growth is noise on a Gen5 x16 link and news on a narrow, slow one."""
    assert [health.aer_corrected_threshold(lk) for lk in (
        {"gen_current": 4, "width_current": 16}, {"gen_current": 5, "width_current": 16},
        {"gen_current": 1, "width_current": 4}, {"gen_current": None, "width_current": 16},
        {"gen_current": 9, "width_current": 16}, {"gen_current": True, "width_current": 16})] == [10, 20, 1, 10, 10, 10]
    clean = _facts(tmp_path, "clean", _with_aer({}))
    grown = _facts(tmp_path, "grown", _with_aer({DSP0: {"correctable": {"RxErr": 15}}}))
    previous = {"pcie": clean, "kmsg": {"boot_id": "b1"}}
    # +15 on the machine's Gen5 x16 link: below its threshold of 20
    assert list(health.aer_counters(_view(grown, previous=previous))) == []
    # the same +15 where that link trained at Gen2 x8 (threshold 2) or Gen1 x4 (1): warnings that say so
    for (gen, width), expected in (((2, 8), "fewer than 2 correctable per run"), ((1, 4), "no correctable errors per run")):
        for lk in grown["aer_links"]:
            lk["gen_current"], lk["width_current"] = gen, width
        [f] = health.aer_counters(_view(grown, previous=previous))
        assert f.severity.value == "warn" and "correctable +15" in f.message and expected in str(f.expected)


def test_a_links_total_is_the_kernels_total_line_else_the_sum_of_its_counters() -> None:
    from orchestrator.facts.normalize.pcie import _aer_total
    # the kernel's TOTAL line is the count, whatever the lines above it say
    assert _aer_total({"RxErr": 3, "TOTAL_ERR_COR": 7}, "TOTAL_ERR_COR") == 7
    # without it (or with a total that is not a count) the counters are summed, other totals left out
    assert _aer_total({"RxErr": 3, "BadTLP": 2, "TOTAL_ERR_FATAL": 9}, "TOTAL_ERR_COR") == 5
    assert _aer_total({"RxErr": 3, "TOTAL_ERR_COR": True}, "TOTAL_ERR_COR") == 3
    assert _aer_total({"RxErr": 3, "TOTAL_ERR_COR": "7"}, "TOTAL_ERR_COR") == 3
    assert _aer_total({"RxErr": "x"}, "TOTAL_ERR_COR") is None and _aer_total(None, "TOTAL_ERR_COR") is None


def test_a_counter_line_whose_count_is_no_ascii_number_is_left_out(tmp_path: Path) -> None:
    """A counter file of a host's sysfs with a superscript where the count goes (str.isdigit says
    yes to it, int() refuses it): that line is left out, the probe answers with the rest."""
    root = build_machine(_with_aer({}), tmp_path / "odd")
    (root / "sys/bus/pci/devices" / GPU0 / "aer_dev_correctable").write_text(
        "RxErr \u00b2\nBadTLP 3\nTOTAL_ERR_COR 3\n", encoding="utf-8")
    env = run_probe(root)
    assert env["status"] == "ok", env["errors"]
    gpu = next(d for d in env["data"]["devices"] if d["bdf"] == GPU0)
    assert gpu["aer"]["correctable"] == {"BadTLP": 3, "TOTAL_ERR_COR": 3}
