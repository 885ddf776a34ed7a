"""Document ids of flows, ForEach lanes and rejected records: the one place that turns a key
into the id Firestore stores it under, and back.

Callers choose flow ids (``order-000123``, ``order-000124``, ...) and Firestore keeps documents
in id order, so ids that sort together would land on one tablet, which takes about 500 writes
per second (https://cloud.google.com/firestore/docs/best-practices#high_read_write_and_delete_rates_to_a_narrow_document_range).
The stored id is ``{prefix_of(key)}:{key}``: a hash prefix spreads whatever ids callers choose.
A lane's key is hashed whole, so one ForEach's lanes spread too. Nothing outside
``relayflow.gcp.store`` sees these ids: everything else names flows by key.

A document written by a release before this one lives at its bare key (``legacy_id``); the
store reads there when the spread id holds nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

from relayflow.core.labels import entries
from relayflow.core.sharding import PREFIX_DIGITS, prefix_of, shard_of

SEPARATOR = ":"


def document_id(key: str) -> str:
    """The id the document of ``key`` is stored under."""
    return f"{prefix_of(key)}{SEPARATOR}{key}"


def legacy_id(key: str) -> str:
    """The id an earlier release stored ``key``'s document under: the key itself."""
    return key


def key_of(doc_id: str) -> str:
    """The key a stored id names: the spread id's key, or a legacy id as it is."""
    prefix, sep, key = doc_id.partition(SEPARATOR)
    if sep and len(prefix) == PREFIX_DIGITS and prefix == prefix_of(key):
        return key
    return doc_id


def is_lane(key: str) -> bool:
    """Whether ``key`` names a ForEach lane (``{parent key}.{scope}.{lane}``) rather than a
    flow: flow keys have no dots."""
    return "." in key


def shard_field(key: str, shards: int) -> dict[str, int]:
    """The ``shard`` field a document of ``key`` is created with."""
    return {"shard": shard_of(key, shards)}


# The field ``find`` (a flow id across tenants) queries: the id behind its hash prefix, so its
# single-field index takes new entries all over its range, where ``flow_id`` itself (callers
# number their flows) would put every flow's entry at the end of one (no index on it).
FIND_FIELD = "id_spread"


def find_value(flow_id: str) -> str:
    """The ``FIND_FIELD`` value of the flows whose id is ``flow_id`` (in any tenant)."""
    return f"{prefix_of(flow_id)}{SEPARATOR}{flow_id}"


def find_field(flow_id: str) -> dict[str, str]:
    """The ``FIND_FIELD`` a flow document is created with."""
    return {FIND_FIELD: find_value(flow_id)}


# The field a list by label asks ``array-contains`` of: a flow's labels as ``key=value``
# strings (``core.labels.entries``), so one index serves every key. Written once, at the
# create: labels never change.
LABEL_FIELD = "label_index"


def label_field(labels: Mapping[str, str]) -> dict[str, list[str]]:
    """The ``LABEL_FIELD`` a flow document with ``labels`` is created with (none: no field)."""
    return {LABEL_FIELD: entries(labels)} if labels else {}
