"""Looking for a secret in bytes or text a test collected: documents, task bodies, events."""

from __future__ import annotations

import re

# A secret in clear stands between quotes, spaces or punctuation; inside a longer word or
# number it is chance, not a leak: a three-digit CVC turns up in a timestamp's fraction
# (``…:07.737Z``) or in a ciphertext's base64.
_WORD = r"[0-9A-Za-z.+/=_-]"


def holds(where: bytes | str, secret: str) -> bool:
    """Whether ``secret`` is in ``where`` as a value of its own."""
    pattern = rf"(?<!{_WORD}){re.escape(secret)}(?!{_WORD})"
    if isinstance(where, bytes):
        return re.search(pattern.encode(), where) is not None
    return re.search(pattern, where) is not None
