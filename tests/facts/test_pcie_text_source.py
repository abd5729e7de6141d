"""The pcie normalizer reading device records built from lspci text (issue 48 item 5): what lspci
does not print is read as unknown, never guessed, and a probe's records read exactly as before."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.facts.normalize import pcie
from orchestrator.facts.normalize.pcie import TEXT_SOURCE


def _dev(bdf: str, cls: str | None, vendor: str | None = "0x10de", text: bool = True, **extra: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"bdf": bdf, "path": ["pci0000:00", bdf], "vendor": vendor, "device": "0x2330",
                         "class": cls, "config": extra.pop("config", {"length": None} if text else {})}
    if text:
        d["source"] = TEXT_SOURCE
    return d | extra


# lspci -nn prints four class digits: the subclass names the kind; a probe's record never has four
@pytest.mark.parametrize(("cls", "vendor", "kind"), [
    ("0x0302", "0x10de", "gpu"), ("0x0300", "0x10de", "gpu"), ("0x0680", "0x10de", "nvswitch"),
    ("0x0108", "0x144d", "nvme"), ("0x0207", "0x15b3", "nic"), ("0x0200", "0x8086", "nic"),
    ("0x0302", "0x1002", "other"), ("0x0c03", "0x8086", "other")])
def test_a_class_without_prog_if_names_the_kind_only_in_text(cls: str, vendor: str, kind: str) -> None:
    out = pcie.normalize({"devices": [_dev("0000:01:00.0", cls, vendor)]})
    assert out["devices"][0]["kind"] == kind and out["devices"][0]["vf"] is None
    probe = pcie.normalize({"devices": [_dev("0000:01:00.0", cls, vendor, text=False)]})
    assert probe["devices"][0]["kind"] == "other" and probe["devices"][0]["vf"] is False  # as before


@pytest.mark.parametrize(("name_kind", "kind", "source"), [
    ("gpu", "gpu", "name"), ("nic", "nic", "name"), ("other_gpu", "other_gpu", "name"), ("bridge", "root_port", None),  # a root bus bridge: its place
    (None, None, None)])
def test_without_a_class_the_name_gives_the_kind_or_it_stays_unknown(name_kind: str | None, kind: str | None,
                                                                      source: str | None) -> None:
    d = pcie.normalize({"devices": [_dev("0000:01:00.0", None, name_kind=name_kind)]})["devices"][0]
    assert d["kind"] == kind and d.get("kind_source") == source


@pytest.mark.parametrize("width", [0])
@pytest.mark.parametrize("speed", [1, 4, 5])
def test_an_untrained_links_stale_speed_is_unknown_in_text(speed: int, width: int) -> None:
    link = {"port_type": 0, "lnkcap_speed": 5, "lnkcap_width": 16, "lnksta_speed": speed, "lnksta_width": width}
    text = pcie.normalize({"devices": [_dev("0000:01:00.0", "0x0302", config={"length": None, "pcie": link})]})
    assert text["devices"][0]["link"]["gen_current"] is None and text["devices"][0]["link"]["width_current"] == 0
    probe = pcie.normalize({"devices": [_dev("0000:01:00.0", "0x030200", text=False,
                                             config={"length": 4096, "pcie": link})]})
    assert probe["devices"][0]["link"]["gen_current"] == speed  # the probe's config fallback as before


@pytest.mark.parametrize("config", [
    {"length": None},
    {"length": None, "acs": {"unknown": "no ACSCap in the imported text"}},
    {"length": None, "pcie": {"port_type": None, "lnkcap_speed": 4, "lnkcap_width": 16, "lnksta_speed": 4,
                              "lnksta_width": 16}, "acs": {"unknown": "no ACSCap in the imported text"}}])
def test_text_never_claims_root_was_needed(config: dict[str, Any]) -> None:
    out = pcie.normalize({"devices": [_dev("0000:01:00.0", "0x0302", config=config)]})
    d = out["devices"][0]
    assert d["port_type"] is None and "lspci -vvv" in d["port_type_unknown"]
    assert d["acs_unknown"] in (None, "no ACSCap in the imported text") and out["needs_root"] == []
