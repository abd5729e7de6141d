"""`probe hosts --list/--graph` rendering (the ansible-inventory shapes; full-size comparisons with
recorded ansible-inventory output are in test_inventory_loader.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.inventory import (
    Inventory,
    InventoryError,
    inventory_graph,
    inventory_list,
    load_inventory,
    select_hosts,
)

TEXT = """\
all:
  hosts:
    solo:
  children:
    gpu:
      vars: {probe_expect_gpu_count: 8}
      children:
        h100:
          hosts:
            g[1:2]:
        spare:
    cpu:
      hosts:
        c1: {ansible_host: 10.0.0.1}
    net:
      children:
        h100:
"""


@pytest.fixture
def inv(tmp_path: Path) -> Inventory:
    p = tmp_path / "inv.yml"
    p.write_text(TEXT)
    return load_inventory([str(p)])


def test_list_shape(inv: Inventory) -> None:
    out = inventory_list(inv)
    assert json.loads(json.dumps(out)) == out  # JSON-able as is
    assert out == {
        "_meta": {
            "hostvars": {
                "g1": {"probe_expect_gpu_count": 8},
                "g2": {"probe_expect_gpu_count": 8},
                "c1": {"ansible_host": "10.0.0.1"},
            }
        },
        "all": {"children": ["ungrouped", "gpu", "cpu", "net"]},
        "ungrouped": {"hosts": ["solo"]},
        "gpu": {"children": ["h100", "spare"]},
        "h100": {"hosts": ["g1", "g2"]},
        "cpu": {"hosts": ["c1"]},
        "net": {"children": ["h100"]},
    }  # "spare" is empty, so like Ansible it is named as a child but has no entry; solo has no vars


def test_list_limited(inv: Inventory) -> None:
    out = inventory_list(inv, select_hosts(inv, "g2,solo"))
    assert out["h100"] == {"hosts": ["g2"]} and "cpu" not in out
    assert list(out["_meta"]["hostvars"]) == ["g2"]


def test_graph(inv: Inventory) -> None:
    assert inventory_graph(inv) == "\n".join(
        [
            "@all:",
            "  |--@ungrouped:",
            "  |  |--solo",
            "  |--@gpu:",
            "  |  |--@h100:",
            "  |  |  |--g1",
            "  |  |  |--g2",
            "  |  |--@spare:",
            "  |--@cpu:",
            "  |  |--c1",
            "  |--@net:",
            "  |  |--@h100:",
            "  |  |  |--g1",
            "  |  |  |--g2",
        ]
    )


def test_graph_of_one_group_and_limited(inv: Inventory) -> None:
    assert (
        inventory_graph(inv, "gpu", select_hosts(inv, "g1")) == "@gpu:\n  |--@h100:\n  |  |--g1\n  |--@spare:"
    )
    with pytest.raises(InventoryError, match="no group 'gpux'"):
        inventory_graph(inv, "gpux")
