"""api/claims.py: which bundle document speaks for a name, decided the same in every order of the files."""

from __future__ import annotations

import itertools

import pytest

from orchestrator.api.claims import Claim, decide, place_slot

CASES = {
    "placed-winner": [Claim("out/node05.json", "node05"), Claim("out/evil03.json", "node05"),
                      Claim("out/node01.json", "node01")],
    "three-claimants": [Claim("out/node05.json", "node05"), Claim("out/a.json", "node05"),
                        Claim("out/z.json", "node05"), Claim("out/m.json", "node05")],
    "contested": [Claim("out/42.0.json", "node05", ("42", "", "0")), Claim("out/42.1.json", "node05", ("42", "", "1")),
                  Claim("out/42.2.json", "node01", ("42", "", "2"))],
    "two-placed-alike": [Claim("a/node05.json", "node05"), Claim("b/node05.json", "node05")],
    "slot-lie": [Claim("out/42.1.json", "node05", ("42", "", "0")), Claim("out/42.0.json", "node05", ("42", "", "0"))],
    "claims-a-claimants-name": [Claim("out/node05.json", "node05"), Claim("out/x.json", "node05"),
                                Claim("out/y.json", "node05#2")],
}


def _as_map(claims: list[Claim]) -> dict[tuple[str, str], tuple[str, bool]]:
    return {(c.source, c.name): (n.name, bool(n.refused)) for c, n in zip(claims, decide(claims))}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_order_of_the_files_decides_nothing(case: str) -> None:
    claims = CASES[case]
    first = _as_map(claims)
    for order in itertools.permutations(claims):
        assert _as_map(list(order)) == first
    names = [n for n, _ in first.values()]
    assert len(names) == len(set(names)), names  # every document a name of its own
    for (_source, claimed), (name, refused) in first.items():
        assert refused == (name != claimed)  # a claimant never has the name it claims


def test_what_each_case_decides() -> None:
    got = {case: _as_map(claims) for case, claims in CASES.items()}
    assert got["placed-winner"][("out/node05.json", "node05")] == ("node05", False)
    assert got["placed-winner"][("out/evil03.json", "node05")] == ("node05#2", True)
    assert sorted(n for n, r in got["three-claimants"].values() if r) == ["node05#2", "node05#3", "node05#4"]
    assert {n for n, _ in got["contested"].values()} == {"node05#1", "node05#2", "node01"}
    assert all(r for r in got["two-placed-alike"].values())
    assert got["slot-lie"][("out/42.0.json", "node05")] == ("node05", False)
    # a document that names itself as another's claimant name keeps it; the claimant is numbered around it
    assert got["claims-a-claimants-name"][("out/y.json", "node05#2")] == ("node05#2", False)
    assert got["claims-a-claimants-name"][("out/x.json", "node05")] == ("node05#3", True)


@pytest.mark.parametrize("name,slot", [("42.3.json", ("42", "3")), ("42.3.out", ("42", "3")), ("node05.json", None),
                                       ("42.0.3.json", None), ("42.json", None), ("x42.3.json", None),
                                       ("42.-3.json", None)])
def test_a_files_place_as_a_slot(name: str, slot: tuple[str, str] | None) -> None:
    assert place_slot(f"out/{name}") == slot


def test_ten_thousand_claimants_of_one_name_are_named_in_linear_time() -> None:
    """A flood of documents claiming one name: each numbered once, without rescanning the names
    taken (quadratic: 50 million lookups)."""
    import time

    claims = [Claim(f"out/42.{i}.json", "node05", ("42", "", str(i))) for i in range(10_000)]
    started = time.monotonic()
    named = decide(claims)
    assert time.monotonic() - started < 5
    assert len({n.name for n in named}) == 10_000 and all(n.refused for n in named)
