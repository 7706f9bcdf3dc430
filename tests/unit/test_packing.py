"""A message's transport packing (fedtext/common/packing.py): many small arrays travel as one
object and arrive as they left, bit for bit, in order; the grid packs what it pushes and
unpacks what it pulls; the ClientApp's mod answers in kind."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Error, Message, Metadata, MetricRecord, RecordDict
from flwr.app.message_type import MessageType
from flwr.common import ndarrays_to_parameters
from flwr.common.serde import make_message
from flwr.compat.common import recorddict_compat as compat
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects
from flwr.supercore.inflatable.inflatable_utils import inflate_object_from_contents

from fedtext.common import packing
from fedtext.server import grid as grid_mod


def fit_content(sizes: list[int], seed: int = 0) -> RecordDict:
    """A fit message's content as Flower's legacy path builds it: one NPY blob an array
    (float32 vectors of the given lengths), the config and a metric beside it."""
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    record = compat.parameters_to_arrayrecord(ndarrays_to_parameters(arrays), keep_input=True)
    return RecordDict({"fitins.parameters": record, "fitins.config": ConfigRecord({"round": 3}),
                       "m": MetricRecord({"x": 1.5})})


IDS = itertools.count()


def message(content: RecordDict, reply_to: Message | None = None) -> Message:
    """A message as the SuperLink delivers it (metadata set), or a reply to ``reply_to``."""
    metadata = Metadata(run_id=7, message_id=f"m-{next(IDS)}", src_node_id=0 if reply_to is None else 7,
                        dst_node_id=7 if reply_to is None else 0,
                        reply_to_message_id="" if reply_to is None else reply_to.metadata.message_id,
                        group_id="1", created_at=time.time(), ttl=3600.0, message_type=MessageType.TRAIN)
    return make_message(metadata=metadata, content=content)


def same(a: RecordDict, b: RecordDict) -> None:
    """Equal record for record, key order included, and each Array's four fields."""
    assert list(a.keys()) == list(b.keys())
    for name in a:
        if isinstance(a[name], ArrayRecord):
            assert list(a[name].keys()) == list(b[name].keys())
            for k in a[name]:
                x, y = a[name][k], b[name][k]
                assert (x.dtype, tuple(x.shape), x.stype, x.data) == (y.dtype, tuple(y.shape), y.stype, y.data)
        else:
            assert dict(a[name]) == dict(b[name])


def test_small_arrays_travel_as_one_object_and_come_back_bit_for_bit_in_order(monkeypatch):
    monkeypatch.setattr(packing, "PACK_BELOW", 4096)
    # 1,000 floats = 4,000 data bytes + 128 header bytes: kept; the others packed, between and after it
    content = fit_content([5, 1000, 7, 3, 1, 900])
    packed = packing.pack(content)
    record = packed["fitins.parameters"]
    assert list(record.keys()) == ["1", packing.PACKED_ARRAY]  # the large one under its own key
    sizes = [len(content["fitins.parameters"][k].data) for k in ("0", "2", "3", "4", "5")]
    assert len(record[packing.PACKED_ARRAY].data) == sum(sizes)
    assert record[packing.PACKED_ARRAY].data == b"".join(content["fitins.parameters"][k].data
                                                         for k in ("0", "2", "3", "4", "5"))
    # objects: RecordDict, ArrayRecord, each Array and its one chunk, ConfigRecord, MetricRecord
    assert len(get_all_nested_objects(content)) == 1 + 1 + 6 * 2 + 2
    assert len(get_all_nested_objects(packed)) == 1 + 1 + 2 * 2 + 2 + 1  # + the layout's ConfigRecord
    back = packing.unpack(packed)
    same(back, content)
    assert back.object_id == content.object_id  # Flower's own hash of the whole tree


def test_an_array_exactly_pack_below_stays_and_one_a_byte_smaller_is_packed(monkeypatch):
    content = fit_content([10, 10, 10])
    n = len(content["fitins.parameters"]["0"].data)
    monkeypatch.setattr(packing, "PACK_BELOW", n)
    assert packing.pack(content) is content  # none is under n bytes
    monkeypatch.setattr(packing, "PACK_BELOW", n + 1)
    assert list(packing.pack(content)["fitins.parameters"].keys()) == [packing.PACKED_ARRAY]


def test_a_record_with_one_small_array_is_left_as_it_is_and_so_is_an_unpacked_message():
    one = fit_content([4])
    assert packing.pack(one) is one and packing.unpack(one) is one
    two = fit_content([4, 4])
    assert packing.pack(two) is not two and packing.LAYOUT_KEY in packing.pack(two)


def test_packing_twice_or_over_a_key_packing_uses_is_refused():
    content = packing.pack(fit_content([3, 3]))
    with pytest.raises(ValueError, match="already packed"):
        packing.pack(content)
    clash = RecordDict({"r": ArrayRecord(array_dict={packing.PACKED_ARRAY: Array(np.zeros(2)), "b": Array(np.ones(2))})})
    with pytest.raises(ValueError, match="which packing uses"):
        packing.pack(clash)


@pytest.mark.parametrize("damage, why", [
    (lambda r, lay: r.pop("1"), "its layout keeps"),  # a kept array gone
    (lambda r, lay: r.__setitem__("extra", Array(np.ones(2))), "its layout keeps"),  # an array the layout omits
    (lambda r, lay: lay.__setitem__("fitins.parameters", "not json"), "not a list of"),
    (lambda r, lay: lay.__setitem__("fitins.parameters", lay["fitins.parameters"].replace(', 148]', ']', 1)),
     "no \\[dtype"),  # array 0's spec without its byte count (5 floats: 20 + 128 bytes)
    (lambda r, lay: lay.__setitem__("gone", "[]"), "does not hold"),
])
def test_a_layout_that_does_not_fit_its_record_is_refused_with_why(monkeypatch, damage, why):
    monkeypatch.setattr(packing, "PACK_BELOW", 4096)
    packed = packing.pack(fit_content([5, 1000, 7]))
    damage(packed["fitins.parameters"], packed[packing.LAYOUT_KEY])
    with pytest.raises(ValueError, match=why):
        packing.unpack(packed)


@pytest.mark.parametrize("cut", [1, -1])
def test_a_layout_that_does_not_cover_the_packed_bytes_exactly_is_refused(cut):
    packed = packing.pack(fit_content([3, 4, 5]))
    record = packed["fitins.parameters"]
    blob = record[packing.PACKED_ARRAY].data
    bad = blob[:-1] if cut == 1 else blob + b"\0"
    record[packing.PACKED_ARRAY] = Array(dtype="uint8", shape=(len(bad),), stype=packing.PACKED_STYPE, data=bad)
    with pytest.raises(ValueError, match="packed record 'fitins.parameters'"):
        packing.unpack(packed)


def test_sealed_content_is_one_record_of_its_bytes_and_comes_back_whole():
    """Sealed: RecordDict + one ConfigRecord (two objects, with the Message three) where packed content had
    seven; unsealed: the very tree (Flower's object id of the whole), through Flower's deflate and inflate."""
    content = packing.pack(fit_content([6, 2, 9]), mark=True)
    assert len(get_all_nested_objects(content)) == 1 + 1 + 2 + 3  # RecordDict, ArrayRecord, Array + chunk, 3 others
    sealed = packing.seal(content)
    assert list(sealed.keys()) == [packing.ENVELOPE_KEY] and len(get_all_nested_objects(sealed)) == 2
    assert packing.is_packed(sealed) and not packing.is_packed(fit_content([1]))
    msg = message(sealed)
    contents = {oid: obj.deflate() for oid, obj in get_all_nested_objects(msg).items()}
    assert len(contents) == 3
    rebuilt = inflate_object_from_contents(msg.object_id, contents, keep_object_contents=True)
    opened = packing.unseal(rebuilt.content)
    assert opened.object_id == content.object_id
    same(packing.unpack(rebuilt.content), fit_content([6, 2, 9]))
    assert packing.unseal(content) is content  # not sealed: as it is
    with pytest.raises(ValueError, match="already sealed"):
        packing.seal(sealed)
    with pytest.raises(ValueError, match="already packed"):
        packing.pack(sealed)


def test_content_over_seal_below_stays_a_tree_and_content_at_it_is_sealed(monkeypatch):
    content = fit_content([6, 2, 9])
    size = len(packing.recorddict_to_proto(content).SerializeToString())
    monkeypatch.setattr(packing, "SEAL_BELOW", size - 1)
    assert packing.seal(content) is content
    monkeypatch.setattr(packing, "SEAL_BELOW", size)
    assert list(packing.seal(content).keys()) == [packing.ENVELOPE_KEY]
    # arrays alone over the bound: left as they are without serializing the content
    monkeypatch.setattr(packing, "SEAL_BELOW", 16)
    monkeypatch.setattr(packing, "recorddict_to_proto", lambda c: pytest.fail("serialized content over the bound"))
    assert packing.seal(content) is content


@pytest.mark.parametrize("damage, why", [
    (lambda c: c.__setitem__("other", ConfigRecord({"a": 1})), "not \\['fedtext.sealed', 'other'\\]"),
    (lambda c: c[packing.ENVELOPE_KEY].__setitem__("more", b"x"), "one bytes value"),
    (lambda c: c[packing.ENVELOPE_KEY].__setitem__(packing.SEALED_VALUE, "text"), "one bytes value"),
    (lambda c: c[packing.ENVELOPE_KEY].__setitem__(packing.SEALED_VALUE, b"\xff\xff\xff"), "are not a RecordDict"),
])
def test_a_damaged_envelope_is_refused_with_why(damage, why):
    sealed = packing.seal(fit_content([6, 2, 9]))
    damage(sealed)
    with pytest.raises(ValueError, match=why):
        packing.unpack(sealed)


def test_a_packed_message_survives_flowers_own_deflate_and_inflate():
    """What the SuperLink and SuperNode do with it: every object deflated, then the message
    rebuilt from the contents by its id (flwr/supercore/inflatable)."""
    content = fit_content([6, 2, 9])
    msg = message(packing.pack(content))
    contents = {oid: obj.deflate() for oid, obj in get_all_nested_objects(msg).items()}
    rebuilt = inflate_object_from_contents(msg.object_id, contents, keep_object_contents=True)
    same(packing.unpack(rebuilt.content), content)


def test_the_clientapps_mod_unpacks_a_packed_message_and_packs_its_reply():
    content = fit_content([6, 2, 9])
    seen = []

    def call_next(m, _context):
        seen.append(m.content)
        return message(fit_content([1, 2, 3], seed=1), reply_to=m)

    msg = message(packing.pack(content))
    reply = packing.packing_mod(msg, None, call_next)
    same(seen[0], content)
    assert list(reply.content.keys()) == [packing.ENVELOPE_KEY]  # sealed: one record of the content's bytes
    opened = packing.unseal(reply.content)
    assert list(opened["fitins.parameters"].keys()) == [packing.PACKED_ARRAY]  # packed, not only marked
    same(packing.unpack(reply.content), fit_content([1, 2, 3], seed=1))
    # a sealed message is unpacked as well, and answered sealed
    seen.clear()
    reply = packing.packing_mod(message(packing.seal(packing.pack(content))), None, call_next)
    same(seen[0], content)
    assert list(reply.content.keys()) == [packing.ENVELOPE_KEY]


def test_the_clientapps_mod_answers_an_unpacked_message_unpacked_but_marked():
    content = fit_content([6, 2, 9])

    def call_next(m, _context):
        assert m.content is content
        return message(fit_content([1, 2, 3]), reply_to=m)

    reply = packing.packing_mod(message(content), None, call_next)
    assert dict(reply.content[packing.LAYOUT_KEY]) == {}  # the mark alone: "this node unpacks"
    assert list(reply.content["fitins.parameters"].keys()) == ["0", "1", "2"]
    same(packing.unpack(reply.content), fit_content([1, 2, 3]))


class EchoGrid:
    """A grid whose every pushed message is answered at once with its own content, through
    fedtext's ClientApp mod (``mod=True``) or by a ClientApp without it; records whether each
    pushed message left packed."""

    def __init__(self, mod: bool) -> None:
        self.mod, self.pushed, self.left_packed = mod, [], []

    def push_messages(self, messages):
        self.pushed = list(messages)
        self.left_packed += [packing.ENVELOPE_KEY in m.content for m in self.pushed]  # packed and sealed
        return [m.metadata.message_id for m in self.pushed]

    def pull_messages(self, ids):
        def answer(m, _context):
            return message(m.content, reply_to=m)

        return [packing.packing_mod(m, None, answer) if self.mod else answer(m, None)
                for m in self.pushed if m.metadata.message_id in set(ids)]


def test_a_node_is_sent_packed_messages_once_its_reply_said_it_unpacks_and_the_server_reads_them_unpacked():
    echo = EchoGrid(mod=True)
    grid = grid_mod.ReplyPollingGrid(echo)
    for _ in range(3):
        replies = list(grid.send_and_receive([message(fit_content([6, 2, 9]))]))
        assert len(replies) == 1
        same(replies[0].content, fit_content([6, 2, 9]))  # what the strategy reads: as sent, no mark
    assert echo.left_packed == [False, True, True] and grid.unpackers == {7}


def test_a_reply_that_cannot_be_unpacked_becomes_that_clients_error_and_the_others_stand():
    class Garbling(EchoGrid):
        def pull_messages(self, ids):
            replies = super().pull_messages(ids)
            for r in replies:
                if r.metadata.reply_to_message_id == self.garble:  # opened, a packed array dropped, sealed again
                    assert packing.ENVELOPE_KEY in r.content
                    content = packing.unseal(r.content)
                    content["fitins.parameters"].pop(packing.PACKED_ARRAY)
                    r.content = packing.seal(content)
            return replies

    echo = Garbling(mod=True)
    echo.garble = None
    grid = grid_mod.ReplyPollingGrid(echo)
    grid.send_and_receive([message(fit_content([6, 2, 9]))])  # the node's first reply marks it
    first, second = message(fit_content([6, 2, 9])), message(fit_content([1, 2]))
    echo.garble = first.metadata.message_id
    bad, good = sorted(grid.send_and_receive([first, second]), key=lambda r: r.metadata.reply_to_message_id
                       != first.metadata.message_id)
    assert bad.has_error() and "a packed reply could not be unpacked: packed record 'fitins.parameters'" in \
        bad.error.reason and bad.metadata.reply_to_message_id == first.metadata.message_id
    same(good.content, fit_content([1, 2]))


def test_an_error_reply_passes_the_mod_and_the_grid_as_it_is():
    def fails(m, _context):
        return make_message(metadata=message(RecordDict(), reply_to=m).metadata, error=Error(code=3, reason="boom"))

    reply = packing.packing_mod(message(packing.pack(fit_content([6, 2, 9]))), None, fails)
    assert reply.has_error() and reply.error.reason == "boom"

    class Failing(EchoGrid):
        def pull_messages(self, ids):
            return [fails(m, None) for m in self.pushed]

    (got,) = grid_mod.ReplyPollingGrid(Failing(mod=True)).send_and_receive([message(fit_content([6, 2, 9]))])
    assert got.has_error() and got.error.reason == "boom"


def test_a_clientapp_without_the_mod_is_never_sent_a_packed_message():
    echo = EchoGrid(mod=False)
    grid = grid_mod.ReplyPollingGrid(echo)
    for _ in range(3):
        (reply,) = grid.send_and_receive([message(fit_content([6, 2, 9]))])
        same(reply.content, fit_content([6, 2, 9]))
    assert echo.left_packed == [False, False, False] and grid.unpackers == set()


def test_a_wrapping_grid_s_packed_message_is_not_packed_again():
    """A message may reach push packed already (a grid wrapping this one): it is pushed as it is."""
    echo = EchoGrid(mod=True)
    grid = grid_mod.ReplyPollingGrid(echo)
    grid.unpackers.add(7)
    packed = packing.pack(fit_content([6, 2, 9]))
    grid.push_messages([message(packed)])
    assert echo.pushed[0].content is packed
