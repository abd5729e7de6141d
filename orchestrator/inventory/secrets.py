"""What counts as a secret among inventory variables: one rule for redaction everywhere."""

from __future__ import annotations

import re

# Substrings of variable names whose values are never echoed or written: ansible_password,
# ansible_become_password, ansible_ssh_pass, *_private_key_passphrase, api_token, credentials...
SECRET_WORDS = "pass|secret|token|credential"
SECRET_NAME = re.compile(SECRET_WORDS, re.IGNORECASE)


def is_secret(name: str) -> bool:
    return SECRET_NAME.search(name) is not None
