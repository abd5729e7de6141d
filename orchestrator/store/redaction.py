"""What of the inventory may reach disk and messages: secret-looking variables never do."""

from __future__ import annotations

import re
from typing import Any

from orchestrator.inventory.secrets import SECRET_WORDS, is_secret


def public_vars(vars: dict[str, Any]) -> dict[str, Any]:
    """Inventory variables minus anything that looks like a secret (never written to disk)."""
    return {k: ("<redacted>" if is_secret(k) else v) for k, v in vars.items()}


# `key=value` / `key: value` in a message, where the key looks like a secret's
_SECRET_ASSIGN = re.compile(r"""(\b[\w.-]*(?:""" + SECRET_WORDS + r""")[\w.-]*['"]?\s*[=:]\s*)"""
                            r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\s,;)]+)""", re.IGNORECASE)


def redact_message(text: str) -> str:
    """An error message with the values of secret-looking variables replaced (e.g. the inventory
    loader's "gets ansible_password='...' here but ...='...' there")."""
    return _SECRET_ASSIGN.sub(lambda m: m.group(1) + "<redacted>", text)
