"""What the api, the console and the CLI (through the api) show of flows' sensitive fields.

A flow's document holds its sensitive values sealed (``core.sealing``). Every caller sees them
as ``"[redacted]"`` — viewers and operators alike — except callers on
``RELAYFLOW_API_SENSITIVE_READERS`` (``Caller.sensitive``), for whom the api opens them with
the deployment's key, logging each such read (who, which flow). A dead-lettered start message
is shown with its flow's sensitive input redacted, to every caller (``core.redaction``): it is
no flow's, and nothing in it was sealed.
"""

from __future__ import annotations

import logging
from typing import Any

from relayflow.core.dead_letters import DeadLetter
from relayflow.core.flows import Registry
from relayflow.core.records import FlowRecord
from relayflow.core.redaction import kept_message
from relayflow.core.sealing import Sealing, markers, owner_of, redacted
from relayflow.web.access import Caller

log = logging.getLogger("relayflow.web.redaction")


def shown_doc(
    doc: dict[str, Any], record: FlowRecord, viewer: Caller, sealing: Sealing | None
) -> dict[str, Any]:
    """``record``'s document as JSON (``doc``) as ``viewer`` may see it: its sealed values
    opened for a sensitive reader (the read logged), ``"[redacted]"`` for anyone else."""
    if not any(True for _ in markers(doc)):
        return doc
    if not viewer.sensitive or sealing is None:
        shown: dict[str, Any] = redacted(doc)
        return shown
    log.info(
        "sensitive fields shown",
        extra={"identity": viewer.identity, "flow_id": record.flow_id, "tenant": record.tenant},
    )
    opened: dict[str, Any] = sealing.shown(doc, owner_of(record))
    return opened


def shown_record(record: FlowRecord, viewer: Caller, sealing: Sealing | None) -> FlowRecord:
    """``record`` as ``viewer`` may see it (``shown_doc``), for the console's pages."""
    doc = record.model_dump(mode="python")
    shown = shown_doc(doc, record, viewer, sealing)
    return record if shown is doc else FlowRecord.model_validate(shown)


def shown_letter(letter: DeadLetter, registry: Registry | None) -> tuple[str, str]:
    """A dead letter's data as text as it may be shown, and what was left out of it ('' if
    nothing)."""
    if registry is None:
        return letter.text(), ""
    kept, note = kept_message(letter.data, registry)
    if kept is letter.data:
        return letter.text(), ""
    return kept.decode("utf-8", errors="replace"), note
