"""fleet.schema.json describes the kmsg and nic sections (issue 18) like the other probe sections:
the demo's recorded sections validate, a malformed one is rejected."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

from orchestrator.facts.normalize import kmsg, nic

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "orchestrator" / "schema" / "fleet.schema.json").read_text())
RECORDINGS = ROOT / "orchestrator" / "demo" / "recordings"


def _errors(section: str, value: Any) -> list[str]:
    schema = {"$ref": f"#/$defs/{section}_facts", "$defs": SCHEMA["$defs"]}
    return [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(value)]


def _recorded(host: str, probe: str) -> dict[str, Any]:
    return json.loads((RECORDINGS / host / f"{probe}.json").read_text())["data"]


def test_the_sections_are_described() -> None:
    facts = SCHEMA["$defs"]["host"]["properties"]["facts"]["properties"]
    assert facts["kmsg"] == {"$ref": "#/$defs/kmsg_facts"} and facts["nic"] == {"$ref": "#/$defs/nic_facts"}


def test_recorded_sections_validate_and_malformed_ones_do_not() -> None:
    km = json.loads(json.dumps(kmsg.normalize(_recorded("dgx-h100-16", "kmsg"))))
    assert km["events"] and _errors("kmsg", km) == []
    nc = json.loads(json.dumps(nic.normalize(_recorded("dgx-h100-18", "nic"))))
    assert nc["devices"] and _errors("nic", nc) == []
    bad = dict(km, events=[{"kind": "oops", "t": None}])
    assert _errors("kmsg", bad)
    assert _errors("nic", dict(nc, devices=[{"name": "mlx5_0", "ports": [{"port": "one"}]}]))
