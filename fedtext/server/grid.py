"""The ServerApp's grid with replies pulled as they come, not every 3 s.

Flower 1.42's deployment grid (``flwr/superlink/grid/http_grid.py``, ``send_and_receive``)
pushes a message, then asks the SuperLink for its reply and sleeps 3 s between asks: a reply
that arrives just after an ask waits ~3 s, on every fit and every evaluate of every round,
where the simulation's in-memory grid asks every 0.1 s. :class:`ReplyPollingGrid` wraps
whatever grid Flower hands the ServerApp (:class:`fedtext.server_app.FabAwareServerApp`) and
does the same push-then-pull with asks 0.05 s apart, growing by half each time to at most
:data:`REPLY_POLL_S`: a reply waits at most that long, and a message in flight costs at most
~4 asks a second (10 clients' messages: ~40 small requests a second to the SuperLink's
ServerAppIo API, which listens on the server's own machine, not through the fleet proxy).
Everything else is Flower's grid itself.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from flwr.app import Message, RecordDict
from flwr.server import Grid

REPLY_POLL_S = 0.25  # the longest wait between two asks for replies (Flower's deployment grid: 3 s)
FIRST_POLL_S = 0.05


class ReplyPollingGrid(Grid):
    """``grid`` with :meth:`send_and_receive` asking for replies every ≤ ``REPLY_POLL_S`` s."""

    def __init__(self, grid: Grid, cap_s: float = REPLY_POLL_S) -> None:
        self.grid, self.cap_s = grid, cap_s

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
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self.grid.pull_messages(message_ids)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        """Flower's ``send_and_receive`` (push, then pull until every reply is in or ``timeout``
        passed), with waits 0.05 s, 0.075 s, ... up to ``cap_s`` between pulls."""
        waiting = set(self.grid.push_messages(messages))
        end = time.time() + (timeout or 0.0)
        replies: list[Message] = []
        wait = FIRST_POLL_S
        while timeout is None or time.time() < end:
            got = list(self.grid.pull_messages(waiting))
            replies.extend(got)
            waiting.difference_update(m.metadata.reply_to_message_id for m in got)
            if not waiting:
                break
            time.sleep(wait if timeout is None else max(0.0, min(wait, end - time.time())))
            wait = min(self.cap_s, wait * 1.5)
        return replies
