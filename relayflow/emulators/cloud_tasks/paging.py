"""Opaque page tokens over name-ordered listings."""

from __future__ import annotations

import base64
import binascii
import bisect

from relayflow.emulators.cloud_tasks.errors import InvalidArgument


def page(names: list[str], *, size: int, token: str) -> tuple[list[str], str]:
    """One page of the ascending `names` after `token`, and the token of the next page."""
    start = bisect.bisect_right(names, _decode(token)) if token else 0
    chunk = names[start : start + size]
    more = start + size < len(names)
    return chunk, _encode(chunk[-1]) if more and chunk else ""


def _encode(name: str) -> str:
    return base64.urlsafe_b64encode(name.encode()).decode()


def _decode(token: str) -> str:
    try:
        return base64.b64decode(token.encode(), altchars=b"-_", validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise InvalidArgument(f"Invalid page_token {token!r}") from exc
