"""How a flow's page links its family: the parent of a child flow (``ChildFlow`` steps), and
a parent's children, listed a page at a time by ``GET /flows?parent=ID`` (the CLI's
``relayflow list --parent ID``) — never inlined, so a ForEach of 10,000 children costs the
parent's page nothing."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from relayflow.core.position import TaskKind
from relayflow.core.records import FlowRecord, split_key
from relayflow.core.tenants import DEFAULT_TENANT


def family_json(record: FlowRecord) -> dict[str, Any]:
    """``{"parent": {...} | None, "children": {"list": url, "waiting_for": [ids]}}``: the
    parent this flow is a child of (its id, step, item and page), the list of its own children,
    and the children its steps wait for now."""
    tenant = {} if record.tenant == DEFAULT_TENANT else {"tenant": record.tenant}
    parent = None
    link = record.child_of
    if link is not None:
        query = f"?{urlencode(tenant)}" if tenant else ""
        parent = {
            "flow_id": link.flow_id,
            "step": link.step,
            "item": link.item,
            "url": f"/flows/{link.flow_id}{query}",
        }
    waiting = [
        split_key(track.child)[1]
        for track in record.tracks.values()
        if track.child is not None and track.position.kind is TaskKind.CHILD_WAIT
    ]
    listing = f"/flows?{urlencode({'parent': record.flow_id, **tenant})}"
    return {"parent": parent, "children": {"list": listing, "waiting_for": waiting}}
