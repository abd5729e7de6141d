"""--limit patterns with Ansible's semantics, on the realistic cluster inventory."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.inventory import PatternError, load_inventory, select_hosts
from orchestrator.inventory.model import Inventory, InventoryError

CLUSTER = Path(__file__).resolve().parents[1] / "fixtures" / "inventories" / "cluster" / "hosts.yml"
H100 = ["h100-01", "h100-02", "h100-03", "h100-04", "h100-05"]
A100 = ["a100-01", "a100-02", "a100-03", "a100-07"]
LOGIN = ["login01", "login02.orion.example.net"]
REST = ["nfs01", "bastion", "controller"]
ALL = H100 + A100 + LOGIN + REST


@pytest.fixture(scope="module")
def inv() -> Inventory:
    return load_inventory([str(CLUSTER)])


def names(inv: Inventory, pattern: str | None, warnings: list[str] | None = None) -> list[str]:
    return [h.name for h in select_hosts(inv, pattern, warnings)]


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        (None, ALL),
        ("all", ALL),
        ("*", ALL),
        ("gpu", H100 + A100),  # a group includes its sub-groups' hosts
        ("gpu_a100", A100),
        ("ungrouped", ["bastion"]),
        ("nfs01", ["nfs01"]),
        ("h100-0*", H100),  # glob on host names
        ("gpu_*", H100 + A100),  # glob on group names
        ("*.example.net", ["login02.orion.example.net"]),
        ("a100-0?", A100),
        ("~a100-0[12]", ["a100-01", "a100-02"]),  # regex, re.match
        ("~gpu_(h|a)100", H100 + A100),  # regex on group names
        ("login:storage", [*LOGIN, "nfs01"]),
        ("login,storage", [*LOGIN, "nfs01"]),
        ("storage,login", [*LOGIN, "nfs01"]),  # inventory order, not pattern order
        ("gpu:&infiniband", H100 + A100),
        ("infiniband:&gpu_h100", H100),
        ("gpu:!gpu_a100", H100),
        ("gpu:!h100-0[2:3]", ["h100-01", "h100-04", "h100-05", *A100]),  # a range inside an exclusion
        ("!gpu", LOGIN + REST),  # only exclusions: start from all
        ("&login", LOGIN),
        # Ansible applies unions first, then &, then !, whatever order they are written in
        ("!h100-01:gpu_h100:&infiniband:login", H100[1:]),
        ("gpu:login:&infiniband:!a100-07", H100 + A100[:3]),
        ("gpu[0]", ["h100-01"]),  # subscripts over the group's hosts in inventory order
        ("gpu[-1]", ["a100-07"]),
        ("gpu[1:3]", ["h100-02", "h100-03", "h100-04"]),  # inclusive, as Ansible
        ("gpu_h100[3:]", ["h100-04", "h100-05"]),
        ("h100-[01:03]", H100[:3]),  # nothing is called "h100-", so this is a host range
        ("h100-[02-03,05]", ["h100-02", "h100-03", "h100-05"]),  # pdsh form, commas inside brackets
        ("h100-[02-03,05],login", ["h100-02", "h100-03", "h100-05", *LOGIN]),
        (" gpu_a100 , nfs01 ", [*A100, "nfs01"]),
    ],
)
def test_patterns(inv: Inventory, pattern: str | None, expected: list[str]) -> None:
    assert names(inv, pattern) == expected


def test_limit_file(inv: Inventory, tmp_path: Path) -> None:
    f = tmp_path / "retry"
    f.write_text("# hosts that failed last time\nh100-03\n\nnfs01\n  a100-01  \n")
    assert names(inv, f"@{f}") == ["h100-03", "a100-01", "nfs01"]
    assert names(inv, f"@{f}:!nfs01") == ["h100-03", "a100-01"]
    assert names(inv, f"gpu:&@{f}") == ["h100-03", "a100-01"]


def test_limit_file_missing(inv: Inventory, tmp_path: Path) -> None:
    with pytest.raises(PatternError, match="no such file"):
        select_hosts(inv, f"@{tmp_path / 'none'}")
    with pytest.raises(PatternError, match="a directory, not a file"):
        select_hosts(inv, f"@{tmp_path}")


def test_nothing_matched_names_close_groups(inv: Inventory) -> None:
    with pytest.raises(PatternError) as err:
        select_hosts(inv, "gpu_h10")
    msg = str(err.value)
    assert "'gpu_h10' matches no host or group" in msg and "close names: gpu_h100" in msg
    assert isinstance(err.value, InventoryError)  # one except clause catches inventory and limit errors


def test_nothing_close_lists_the_groups(inv: Inventory) -> None:
    with pytest.raises(PatternError, match="groups are: gpu, gpu_h100, gpu_a100, infiniband, login"):
        select_hosts(inv, "zzzzzz")


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("gpu:&storage", "no host is left after intersecting with '&storage'"),
        ("gpu:&storag", "'&storag' matches no host or group; close names: storage"),
        ("gpu:!gpu", "every selected host is excluded"),
        ("~(", "invalid regular expression"),
        ("  ", "the pattern is empty"),
        ("gpu[9]", "matches no host"),  # subscript past the end selects nothing
    ],
)
def test_pattern_errors(inv: Inventory, pattern: str, message: str) -> None:
    with pytest.raises(PatternError, match=message.replace("(", r"\(").replace("[", r"\[")):
        select_hosts(inv, pattern)


def test_partial_miss_is_a_warning(inv: Inventory) -> None:
    warnings: list[str] = []
    assert names(inv, "storage,stroage:!nosuch", warnings) == ["nfs01"]
    assert any("'stroage' matches no host or group; close names: storage" in w for w in warnings)
    assert any("'!nosuch' matches no host" in w for w in warnings)
    assert names(inv, "storage,stroage") == ["nfs01"]  # without a list, still no failure


def test_host_and_group_with_the_same_name(tmp_path: Path) -> None:
    p = tmp_path / "inv.yml"
    p.write_text("dgx:\n  hosts:\n    dgx01:\n    dgx02:\nother:\n  hosts:\n    dgx:\n")
    inv = load_inventory([str(p)])
    assert names(inv, "dgx") == ["dgx01", "dgx02"]  # the group wins, as in Ansible


def test_ipv6_host_is_one_term(tmp_path: Path) -> None:
    inv = load_inventory(["fe80::1,gpu01,"])
    assert names(inv, "fe80::1") == ["fe80::1"]
    assert names(inv, "gpu01:fe80") == ["gpu01"]  # a plain colon list still splits
