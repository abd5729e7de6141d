"""What counts as a secret among inventory variables: one rule for redaction everywhere.

A variable is secret when its name, or the dotted path to it inside a nested value
(`bmc.password`, `ipmi: {pw: ...}`), contains one of the words below, in any case:
passwords (pass, passwd, pwd, a `pw` that is a word of its own), secrets, tokens, credentials,
API keys, private keys (not `*_private_key_file`: a path), and BMC/IPMI/iDRAC/iLO/Redfish
logins (user, login, auth, key, pw).
"""

from __future__ import annotations

import re

# A regex alternation of name fragments (store/redaction.py also finds `name=value` in messages with it).
SECRET_WORDS = (
    r"pass|pwd|secret|token|credential|api[_.-]?key|private[_.-]?key(?![_.-]?(?:file|path))"
    r"|(?<![a-z])pw(?![a-z])"
    r"|(?<![a-z])(?:bmc|ipmi|idrac|ilo|redfish)[_.-]?(?:user|login|auth|key|pw)"
)
SECRET_NAME = re.compile(SECRET_WORDS, re.IGNORECASE)


def is_secret(name: str, parent: str | None = None) -> bool:
    """Whether the variable `name` (inside the value of `parent`, a dotted path, when nested) is secret."""
    path = f"{parent}.{name}" if parent else str(name)
    return SECRET_NAME.search(path) is not None
