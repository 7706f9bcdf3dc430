"""The ServerApp's grid with replies pulled as they come, not every 3 s.

Flower 1.42's deployment grid (``flwr/superlink/grid/http_grid.py``, ``send_and_receive``)
pushes a message, then asks the SuperLink for its reply and sleeps 3 s between asks: a reply
that arrives just after an ask waits ~3 s, on every fit and every evaluate of every round,
where the simulation's in-memory grid asks every 0.1 s. :class:`ReplyPollingGrid` wraps
whatever grid Flower hands the ServerApp (:class:`fedtext.server_app.FabAwareServerApp`) and
does the same push-then-pull with asks 0.05 s apart, growing by half each time to at most
:data:`REPLY_POLL_S`: a reply waits at most that long, and a round's messages in flight cost
at most ~10 asks a second (one ask names every message still waiting), small requests to the
SuperLink's ServerAppIo API, which listens on the server's own machine, not through the fleet proxy.
It also unpacks every reply it pulls and packs what it pushes to a node whose replies say it
unpacks (:mod:`fedtext.common.packing`: a payload of many small arrays travels as one object,
not one request per array on every hop; fedtext's ClientApp marks its replies). It pushes one
call at a time (:meth:`ReplyPollingGrid.push_messages`), and on Flower's deployment grid a reply's
objects not there yet are asked for again after 0.05 s, not Flower's 1 s
(:func:`fedtext.common.pulls.quick_pulls`). Against fedtext's SuperLink (:mod:`fedtext.server.superlink`),
which holds an empty ask for replies up to 2 s until a reply is stored, an ask that came back empty
after that hold is made again at once. Everything else is Flower's grid itself.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from flwr.app import Error, Message, RecordDict
from flwr.common.constant import ErrorCode
from flwr.common.serde import make_message
from flwr.server import Grid

from fedtext.common import pulls
from fedtext.common.packing import is_packed, pack, seal, unpack

log = logging.getLogger("fedtext")

# the longest wait between two asks for replies (Flower's deployment grid: 3 s): a reply waits half of it on average,
# twice a round (fit, evaluate); 0.25 s until 2026-11-30
REPLY_POLL_S = 0.1
FIRST_POLL_S = 0.05


class ReplyPollingGrid(Grid):
    """``grid`` with :meth:`send_and_receive` asking for replies every ≤ ``REPLY_POLL_S`` s."""

    def __init__(self, grid: Grid, cap_s: float = REPLY_POLL_S) -> None:
        self.grid, self.cap_s = grid, cap_s
        self.unpackers: set[int] = set()  # node ids whose replies carried packing's mark
        self._push_lock = threading.Lock()  # one push at a time: push_messages says why
        if type(grid).__module__ == pulls.SERVER_PULLS:  # Flower's deployment grid (HttpGrid) pulls objects there
            problems = pulls.quick_pulls(pulls.SERVER_PULLS)
            if problems:
                log.warning("replies' objects are pulled with Flower's 1 s backoff: %s", "; ".join(problems))

    @property
    def run(self):
        return self.grid.run

    def set_run(self, run) -> None:
        self.grid.set_run(run)

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str,
                       ttl: float | None = None) -> Message:
        return self.grid.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:
        return self.grid.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        """Flower's push, the content of each message to a node that unpacks packed first
        (:func:`fedtext.common.packing.pack`, then :func:`~fedtext.common.packing.seal`; the caller's message
        is changed in place, its content
        replaced; one that arrives packed already is pushed as it is), one call at a time.

        Why one at a time. Flower's compat ``Server`` sends each client's message from its own
        thread (``grid.send_and_receive([message])`` per client proxy), so a round's messages, which
        share most of their content (the global model and the config; a node sent packed messages
        has its own tree), are pushed in overlapping push sessions. Flower 1.42's SuperLink
        preregisters the tree in each session and lists every object not yet *available* as that
        session's to push: two overlapping sessions both list the shared content, and the second
        pushes it again, two objects at a time, its message's root last. The first session's
        objects already make the content available, so once the second's root is in, its node can
        pull and confirm the message, and with the other node's confirmation the content is
        deleted: a content object of the second session still on its way is then refused
        (``store_object``: "not pre-registered"), Flower's grid raises ``ObjectPushError``, and the
        compat proxy reports that client as failed although its message was delivered and answered
        (CI, 2026-11-30: "evaluate failed: Failed to push object ... The push session may have
        expired or been replaced", in tests/system/test_deploy.py and test_adversarial.py, once
        SuperNodes began pulling within milliseconds). Pushed one after another, a push starts once
        the previous one's objects are all in: it lists only what is not available then (its own
        root, unless the content was consumed and deleted meanwhile, when it lists and pushes the
        content again under its own references), so nothing it lists can be deleted under it, and
        the content usually crosses once a round instead of once per overlapping thread.
        tests/unit/test_edge.py replays both orders on Flower's own LinkState."""
        messages = list(messages)
        for m in messages:
            if m.metadata.dst_node_id in self.unpackers and m.has_content() and not is_packed(m.content):
                m.content = seal(pack(m.content))
        with self._push_lock:
            return self.grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        """Flower's pull, each reply's content unpacked (:func:`fedtext.common.packing.unpack`);
        a reply that carries packing's mark makes its node one that is sent packed messages. A reply
        that cannot be unpacked becomes an error reply naming why (the strategy drops that client
        with the reason; the round's other replies stand)."""
        replies = list(self.grid.pull_messages(message_ids))
        out = []
        for r in replies:
            if r.has_content() and is_packed(r.content):
                self.unpackers.add(r.metadata.src_node_id)
                try:
                    r.content = unpack(r.content)
                except ValueError as err:
                    r = make_message(metadata=r.metadata, error=Error(
                        code=ErrorCode.UNKNOWN, reason=f"fedtext: a packed reply could not be unpacked: {err}"))
            out.append(r)
        return out

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        """Flower's ``send_and_receive`` (push, then pull until every reply is in or ``timeout``
        passed), with waits 0.05 s, 0.075 s, ... up to ``cap_s`` between pulls, and none after an empty
        pull that took :data:`fedtext.common.pulls.HELD_S` or more (fedtext's SuperLink held it,
        :mod:`fedtext.server.superlink`: a reply then comes back within milliseconds of being stored,
        and a held ask can end up to its hold, 2 s, after ``timeout``)."""
        waiting = set(self.push_messages(messages))
        end = time.time() + (timeout or 0.0)
        replies: list[Message] = []
        wait = FIRST_POLL_S
        while timeout is None or time.time() < end:
            asked = time.monotonic()
            got = list(self.pull_messages(waiting))
            replies.extend(got)
            waiting.difference_update(m.metadata.reply_to_message_id for m in got)
            if not waiting:
                break
            if not got and time.monotonic() - asked >= pulls.HELD_S:
                continue  # fedtext's SuperLink held the ask until its hold ran out: ask again at once
            time.sleep(wait if timeout is None else max(0.0, min(wait, end - time.time())))
            wait = min(self.cap_s, wait * 1.5)
        return replies
