"""Many small arrays travel as one: a message's transport packing (issue 68, clause 2).

Flower 1.42 moves a message as a tree of objects (``Message`` → ``RecordDict`` →
``ArrayRecord`` → ``Array`` → ``ArrayChunk`` of at most 5 MiB,
``flwr/supercore/inflatable``), and every object is one request on every hop: the ServerApp
pushes each to the SuperLink, the SuperNode pulls each from it, the ClientApp pulls each from
its SuperNode (``pull_objects``: one ``PullObject`` call an object, at most ``os.cpu_count()``
at once), and the reply makes the same trips back. A method whose payload is many small
arrays pays for the count, not the bytes: fedlora's fit message holds 114 arrays (a LoRA pair
per adapted matrix, the head) of 301 KB in all, 2 objects each, and its ClientApp spent
1.2-1.3 s pulling it where bbt-fed's few arrays take 0.05-0.2 s (profiled on the demo,
2026-11-29, docs/performance.md).

:func:`pack` joins every array of an ``ArrayRecord`` smaller than :data:`PACK_BELOW` into one
``Array`` (their bytes end to end) and writes where each one lies in a ``ConfigRecord``
(:data:`LAYOUT_KEY`); larger arrays stay as they are (Flower chunks them at 5 MiB, so their
object count is already their size's). :func:`unpack` restores the record exactly: the same
keys in the same order, each ``Array``'s dtype, shape, stype and bytes. Nothing a method or
a record sees changes: fedtext measures its bytes on the unpacked payload
(:mod:`fedtext.common.comm`) before it is packed and after it is unpacked.

Sealed (:func:`seal`). Packed, a fit message is still ~7 objects (``Message``, ``RecordDict``, the
``ArrayRecord``, its packed ``Array`` and that one's chunk, the config, the layout), each one request on
each of six hops (the ServerApp's push, the SuperNode's pull, the ClientApp's pull, and the reply's
three back): traced on the demo with ``FLWR_LOG_LEVEL=DEBUG`` (2026-12-03, fedprompt, two SuperNodes),
a fit message took 68 ms for the ServerApp to push, 113 ms for its SuperNode to pull whole and 82 ms
for the ClientApp to pull, nearly all of it one ~10 ms request after another. Whole content
serialized under :data:`SEAL_BELOW` bytes travels as one ``ConfigRecord`` of its bytes under
:data:`ENVELOPE_KEY`: three objects (``Message``, ``RecordDict``, that record), on every hop.
:func:`unpack` opens an envelope first. Larger content stays an object tree, as Flower chunks it.

Who packs, and only for whom it can unpack: fedtext's ClientApp (:func:`packing_mod`, its
outermost mod) unpacks a packed message before anything reads it, and marks every reply with
the layout record (empty when nothing was packed), packing the reply's arrays when the message
came packed. The ServerApp's grid (:class:`fedtext.server.grid.ReplyPollingGrid`) unpacks every
reply it pulls, and packs what it pushes only to a node whose reply carried the mark: the first
message to each node goes as Flower sends it, and a ClientApp built without the mod (a test's,
another app's) is never sent a packed message it could not read.
"""

from __future__ import annotations

import json

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp.typing import ClientAppCallable
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto
from flwr.proto.recorddict_pb2 import RecordDict as ProtoRecordDict

PACK_BELOW = 1 << 20  # bytes: arrays under 1 MiB are packed; at most ~1 MiB x their count is copied once
LAYOUT_KEY = "fedtext.packed"  # the ConfigRecord naming each packed ArrayRecord's layout (JSON a record)
PACKED_ARRAY = "fedtext.packed"  # the key of the one Array that holds a record's packed arrays
PACKED_STYPE = "fedtext.packed"  # its stype: bytes of several arrays end to end, not one array
# content whose serialized RecordDict is at most this many bytes travels sealed: one ConfigRecord of those bytes
# (1 MiB: within the 5 MiB an object of Flower's own chunking may be; a sealed reply fits nginx's cap because deploy/fleet_proxy.py counts a method's arrays together)
SEAL_BELOW = 1 << 20
ENVELOPE_KEY = "fedtext.sealed"  # the ConfigRecord of a sealed message: its one value is the content's bytes
SEALED_VALUE = "content"  # that value's key


def pack(content: RecordDict, mark: bool = False) -> RecordDict:
    """``content`` with each ``ArrayRecord``'s small arrays joined into one ``Array``.

    A record with fewer than two arrays under :data:`PACK_BELOW` is kept as it is; the other
    records (configs, metrics) are carried by reference. The returned ``RecordDict`` holds a
    ``ConfigRecord`` under :data:`LAYOUT_KEY` when anything was packed or ``mark`` is set (then
    possibly empty: "this sender unpacks"); otherwise ``content`` itself is returned.

    Raises
    ------
    ValueError
        ``content`` is packed already, or a record already has a key named :data:`PACKED_ARRAY`.
    """
    _refuse_packed(content)
    layouts: dict[str, str] = {}
    records: dict = {}
    for name, record in content.items():
        if isinstance(record, ArrayRecord):
            packed = _pack_record(name, record)
            if packed is not None:
                record, layouts[name] = packed
        records[name] = record
    if not layouts and not mark:
        return content
    records[LAYOUT_KEY] = ConfigRecord(layouts)
    return RecordDict(records)


def _refuse_packed(content: RecordDict) -> None:
    if is_packed(content):
        raise ValueError(f"message content already packed (it has '{LAYOUT_KEY}' or '{ENVELOPE_KEY}')")


def is_packed(content: RecordDict) -> bool:
    """Whether ``content`` left a fedtext sender packed, sealed or marked (:func:`unpack` reads it)."""
    return LAYOUT_KEY in content or ENVELOPE_KEY in content


def seal(content: RecordDict) -> RecordDict:
    """``content`` as one ``ConfigRecord`` holding its serialized bytes (Flower's own protobuf of a
    ``RecordDict``), when those are at most :data:`SEAL_BELOW` bytes; otherwise ``content`` itself."""
    if ENVELOPE_KEY in content:
        raise ValueError(f"message content already sealed (it has '{ENVELOPE_KEY}')")
    # the arrays' bytes alone over the bound: not serialized at all (fedavg's 90 MB would be copied for nothing)
    if sum(len(a.data) for r in content.values() if isinstance(r, ArrayRecord) for a in r.values()) > SEAL_BELOW:
        return content
    data = recorddict_to_proto(content).SerializeToString()
    if len(data) > SEAL_BELOW:
        return content
    return RecordDict({ENVELOPE_KEY: ConfigRecord({SEALED_VALUE: data})})


def unseal(content: RecordDict) -> RecordDict:
    """Inverse of :func:`seal`: ``content`` unchanged when it is not sealed.

    Raises
    ------
    ValueError
        A sealed message that holds more than its envelope, or whose envelope is not one value of
        bytes that parse as a ``RecordDict``.
    """
    if ENVELOPE_KEY not in content:
        return content
    envelope = content[ENVELOPE_KEY]
    if len(content) != 1 or not isinstance(envelope, ConfigRecord) or list(envelope) != [SEALED_VALUE] \
            or not isinstance(envelope[SEALED_VALUE], bytes):
        raise ValueError(f"a sealed message is one ConfigRecord '{ENVELOPE_KEY}' of one bytes value "
                         f"'{SEALED_VALUE}', not {sorted(content)}")
    try:
        return recorddict_from_proto(ProtoRecordDict.FromString(envelope[SEALED_VALUE]))
    except Exception as err:  # protobuf's DecodeError, or Flower's own on a record it cannot rebuild
        raise ValueError(f"a sealed message's bytes are not a RecordDict: {type(err).__name__}: {err}") from None


def _pack_record(name: str, record: ArrayRecord) -> tuple[ArrayRecord, str] | None:
    """One record packed, with its layout as JSON, or None when fewer than two arrays are small."""
    if PACKED_ARRAY in record:
        raise ValueError(f"array record '{name}' has a key '{PACKED_ARRAY}', which packing uses")
    small = [k for k, a in record.items() if len(a.data) < PACK_BELOW]
    if len(small) < 2:
        return None
    # layout: every key in the record's order; a packed key carries [dtype, shape, stype, bytes],
    # a kept one null (its Array stays under its own key)
    chosen = set(small)
    layout = [[k, [a.dtype, list(a.shape), a.stype, len(a.data)] if k in chosen else None]
              for k, a in record.items()]
    arrays = {k: a for k, a in record.items() if k not in chosen}
    blob = b"".join(record[k].data for k in small)
    arrays[PACKED_ARRAY] = Array(dtype="uint8", shape=(len(blob),), stype=PACKED_STYPE, data=blob)
    return ArrayRecord(array_dict=arrays, keep_input=True), json.dumps(layout)


def unpack(content: RecordDict) -> RecordDict:
    """Inverse of :func:`pack` (and of :func:`seal` first): ``content`` unchanged when it was neither.

    Raises
    ------
    ValueError
        The layout does not match the message (a truncated or foreign message): a layout that
        names no array record, is not JSON, leaves a key of its record out or names one that is
        not there, or does not cover the packed bytes exactly.
    """
    content = unseal(content)
    if LAYOUT_KEY not in content:
        return content
    layouts = content[LAYOUT_KEY]
    if not isinstance(layouts, ConfigRecord):
        raise ValueError(f"'{LAYOUT_KEY}' is a {type(layouts).__name__}, not the layout's ConfigRecord")
    records: dict = {}
    for name, record in content.items():
        if name == LAYOUT_KEY:
            continue
        if name in layouts:
            if not isinstance(record, ArrayRecord):
                raise ValueError(f"packed record '{name}' is a {type(record).__name__}, not an ArrayRecord")
            try:
                layout = json.loads(str(layouts[name]))
                entries = [(str(key), None if spec is None else tuple(spec)) for key, spec in layout]
            except (ValueError, TypeError) as err:
                raise ValueError(f"packed record '{name}': its layout is not a list of [key, spec]: {err}") from None
            record = _unpack_record(name, record, entries)
        records[name] = record
    missing = set(layouts) - set(records)
    if missing:
        raise ValueError(f"the layout names records the message does not hold: {sorted(missing)}")
    return RecordDict(records)


def _unpack_record(name: str, record: ArrayRecord, layout: list[tuple[str, tuple | None]]) -> ArrayRecord:
    kept = {key for key, spec in layout if spec is None}
    if set(record.keys()) != kept | {PACKED_ARRAY}:
        raise ValueError(f"packed record '{name}' holds {sorted(record.keys())}; its layout keeps {sorted(kept)} "
                         f"beside '{PACKED_ARRAY}'")
    blob = memoryview(record[PACKED_ARRAY].data)
    arrays: dict[str, Array] = {}
    at = 0
    for key, spec in layout:
        if spec is None:
            arrays[key] = record[key]
            continue
        try:
            dtype, shape, stype, size = str(spec[0]), tuple(int(n) for n in spec[1]), str(spec[2]), int(spec[3])
        except (ValueError, TypeError, IndexError) as err:
            raise ValueError(f"packed record '{name}': array '{key}' has no [dtype, shape, stype, bytes]: {err}") \
                from None
        if size < 0 or at + size > len(blob):
            raise ValueError(f"packed record '{name}': array '{key}' ends at byte {at + size}, "
                             f"past the packed {len(blob)}")
        arrays[key] = Array(dtype=dtype, shape=tuple(shape), stype=stype, data=bytes(blob[at:at + size]))
        at += size
    if at != len(blob):
        raise ValueError(f"packed record '{name}': layout covers {at} of {len(blob)} packed bytes")
    return ArrayRecord(array_dict=arrays, keep_input=True)


def packing_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """The ClientApp's outermost mod: a packed (or sealed) message is unpacked before anything reads
    it; the reply is marked (this node unpacks), and packed and sealed when the message came packed."""
    came_packed = msg.has_content() and is_packed(msg.content)
    if came_packed:
        msg.content = unpack(msg.content)
    reply = call_next(msg, context)
    if reply.has_content():
        reply.content = seal(pack(reply.content, mark=True)) if came_packed else marked(reply.content)
    return reply


def marked(content: RecordDict) -> RecordDict:
    """``content`` with an empty layout record: nothing packed, but its sender unpacks."""
    _refuse_packed(content)
    return RecordDict({**dict(content.items()), LAYOUT_KEY: ConfigRecord({})})
