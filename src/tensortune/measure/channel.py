"""Framed replies from a worker process: every frame is checked before it is believed.

A candidate runs inside the worker process and can write anything to any file
descriptor, including the one the worker answers on. So each reply travels as a frame
(a magic tag, the number of the call it answers, its length, the pickled reply and a
digest of all of it), and the reading side parses bytes as they arrive: garbage, a frame
longer than `MAX_REPLY`, a digest that does not match or an answer to another call is a
`MalformedReply`, never an exception from deep inside pickle or a read that waits
forever for bytes that will not come.

Example:
    >>> parser = FrameParser()
    >>> parser.feed(encode_frame(7, b"hello"))
    >>> parser.next_frame()
    (7, b'hello')
    >>> parser.feed(b"garbage!" * 4)
    >>> parser.next_frame()
    Traceback (most recent call last):
    ...
    tensortune.measure.channel.MalformedReply: bad frame tag b'garb' (not a reply of the worker)
"""

from __future__ import annotations

import hashlib
import os
import struct

MAGIC = b"TTr1"
_HEADER = struct.Struct("!4sQQ")  # tag, call number, payload length
_DIGEST = 16
MAX_REPLY = 1 << 30  # a reply longer than this is not one the worker sent


class MalformedReply(Exception):
    """Bytes on the result channel that are not a well-formed reply."""


def _digest(header: bytes, payload: bytes) -> bytes:
    h = hashlib.blake2b(header, digest_size=_DIGEST)
    h.update(payload)
    return h.digest()


def encode_frame(call: int, payload: bytes) -> bytes:
    header = _HEADER.pack(MAGIC, call, len(payload))
    return header + payload + _digest(header, payload)


def write_frame(fd: int, call: int, payload: bytes) -> None:
    """Write one whole frame to `fd` (a blocking descriptor)."""
    view = memoryview(encode_frame(call, payload))
    while view:
        view = view[os.write(fd, view):]


class FrameParser:
    """Turns the bytes read so far into frames, one at a time."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self.buffer += data

    @property
    def partial(self) -> bool:
        """Bytes are buffered that do not make a whole frame yet."""
        return bool(self.buffer)

    def next_frame(self) -> tuple[int, bytes] | None:
        """The next whole frame as (call number, payload), None if more bytes are needed;
        MalformedReply for bytes that cannot be the start of a frame."""
        if len(self.buffer) < 4:
            if not MAGIC.startswith(bytes(self.buffer)):
                raise MalformedReply(f"bad frame tag {bytes(self.buffer)!r} (not a reply of the worker)")
            return None
        if self.buffer[:4] != MAGIC:
            raise MalformedReply(f"bad frame tag {bytes(self.buffer[:4])!r} (not a reply of the worker)")
        if len(self.buffer) < _HEADER.size:
            return None
        _, call, length = _HEADER.unpack_from(self.buffer)
        if length > MAX_REPLY:
            raise MalformedReply(f"frame claims {length} bytes, more than any reply ({MAX_REPLY})")
        end = _HEADER.size + length + _DIGEST
        if len(self.buffer) < end:
            return None
        header = bytes(self.buffer[:_HEADER.size])
        payload = bytes(self.buffer[_HEADER.size:_HEADER.size + length])
        if bytes(self.buffer[_HEADER.size + length:end]) != _digest(header, payload):
            raise MalformedReply("frame digest does not match its contents")
        del self.buffer[:end]
        return call, payload
