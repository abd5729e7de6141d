"""What of the inventory may reach disk and messages: secret-looking variables never do."""

from __future__ import annotations

import re
from typing import Any

from orchestrator.inventory.secrets import SECRET_WORDS, is_secret

REDACTED = "<redacted>"


def public_vars(vars: dict[str, Any]) -> dict[str, Any]:
    """Inventory variables minus anything that looks like a secret (never written to disk),
    nested values included (`bmc: {password: ...}`)."""
    return {k: (REDACTED if is_secret(k) else _public(v, str(k))) for k, v in vars.items()}


def _public(value: Any, path: str, depth: int = 0) -> Any:
    if depth > 32:  # deeper than any inventory means; nothing of it is kept
        return REDACTED
    if isinstance(value, dict):
        return {k: (REDACTED if is_secret(str(k), path) else _public(v, f"{path}.{k}", depth + 1))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_public(v, path, depth + 1) for v in value]
    return value


# `key=value` / `key: value` in a message, where the key looks like a secret's
_SECRET_ASSIGN = re.compile(r"""(\b[\w.-]*(?:""" + SECRET_WORDS + r""")[\w.-]*['"]?\s*[=:]\s*)"""
                            r"""('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\s,;)]+)""", re.IGNORECASE)


def redact_message(text: str) -> str:
    """An error message with the values of secret-looking variables replaced (e.g. the inventory
    loader's "gets ansible_password='...' here but ...='...' there")."""
    return _SECRET_ASSIGN.sub(lambda m: m.group(1) + REDACTED, text)
