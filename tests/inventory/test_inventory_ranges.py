"""Host ranges: Ansible's [a:b(:s)] and the pdsh/Slurm [a-b,c] forms, and their errors."""

from __future__ import annotations

import pytest

from orchestrator.inventory.model import InventoryError
from orchestrator.inventory.ranges import MAX_RANGE_HOSTS, RangeError, expand_host_pattern, expand_range


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("gpu01", ["gpu01"]),
        ("gpu[01:04]", ["gpu01", "gpu02", "gpu03", "gpu04"]),
        ("gpu[1:3]", ["gpu1", "gpu2", "gpu3"]),
        ("gpu[08:11]", ["gpu08", "gpu09", "gpu10", "gpu11"]),
        ("gpu[01:09:4]", ["gpu01", "gpu05", "gpu09"]),
        ("gpu[001:003]", ["gpu001", "gpu002", "gpu003"]),
        ("gpu[:2]", ["gpu0", "gpu1", "gpu2"]),  # Ansible reads an empty start as 0
        ("node[a:d]", ["nodea", "nodeb", "nodec", "noded"]),
        ("node[a:e:2]", ["nodea", "nodec", "nodee"]),
        ("node[y:B]", ["nodey", "nodez", "nodeA", "nodeB"]),  # Ansible's letters run a..zA..Z
        ("gpu[01-04]", ["gpu01", "gpu02", "gpu03", "gpu04"]),
        ("gpu[9-11]", ["gpu9", "gpu10", "gpu11"]),
        ("gpu[01-03,07,10-12]", ["gpu01", "gpu02", "gpu03", "gpu07", "gpu10", "gpu11", "gpu12"]),
        ("gpu[5]", ["gpu5"]),
        ("node[a-c]", ["nodea", "nodeb", "nodec"]),
        ("r[1:2]-gpu[01-02].dc", ["r1-gpu01.dc", "r1-gpu02.dc", "r2-gpu01.dc", "r2-gpu02.dc"]),
        ("[a:b]x", ["ax", "bx"]),
    ],
)
def test_expands(pattern: str, expected: list[str]) -> None:
    assert expand_range(pattern) == expected


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("gpu[04:01]", "greater than end"),
        ("gpu[04-01]", "greater than end"),
        ("node[f:a]", "comes after end"),
        ("gpu[a:5]", "both be numbers or both be single letters"),
        ("gpu[1-b]", "both be numbers or both be single letters"),
        ("gpu[aa:ac]", "both be numbers or both be single letters"),
        ("gpu[01:100]", "same width"),
        ("gpu[1:]", "no end"),
        ("gpu[1:5:0]", "at least 1"),
        ("gpu[1:5:x]", "at least 1"),
        ("gpu[1:2:3:4]", "expected [start:end]"),
        ("gpu[01", "never closed"),
        ("gpu01]", "without a matching"),
        ("gpu[]", "empty brackets"),
        ("gpu[[1:2]]", "nested"),
        ("gpu[1-3,,5]", "empty item"),
        ("gpu[-3]", "needs a start and an end"),
        ("gpu[1.5]", "not a number"),
        (f"gpu[0:{MAX_RANGE_HOSTS}]", "more than"),
        ("a[0:999]b[0:999]", "more than the limit"),
    ],
)
def test_refuses(pattern: str, message: str) -> None:
    with pytest.raises(RangeError, match=message.replace("[", r"\[")):
        expand_range(pattern)


def test_error_names_place() -> None:
    with pytest.raises(InventoryError) as err:
        expand_host_pattern("gpu[09:01]", "fleet.yml:12")
    assert str(err.value).startswith("fleet.yml:12: host range 'gpu[09:01]' does not expand")
