"""Messages between processes whose numpy versions may differ (a board's Arm NN brings
Debian's numpy 1.x, its TVM and LiteRT numpy 2): a message is a tuple whose items are JSON
values, bytes, or lists of arrays; arrays travel in `.npy` format, never as pickles.

Framing on a byte stream: 4-byte header length, JSON header, 8-byte body length, body
(an uncompressed `.npz` holding every array and bytes item in order)."""

from __future__ import annotations

import io
import json
import struct
from typing import Any

import numpy as np


def encode(msg: tuple) -> bytes:
    arrays: list[np.ndarray] = []
    items: list[dict[str, Any]] = []
    for item in msg:
        if isinstance(item, (bytes, bytearray, memoryview)):
            items.append({"b": len(arrays)})
            arrays.append(np.frombuffer(bytes(item), dtype=np.uint8))
        elif isinstance(item, (list, tuple)) and item and all(isinstance(a, np.ndarray) for a in item):
            items.append({"a": list(range(len(arrays), len(arrays) + len(item)))})
            arrays.extend(np.ascontiguousarray(a) for a in item)
        else:
            items.append({"j": item})
    body = io.BytesIO()
    if arrays:
        np.savez(body, *arrays)
    head = json.dumps(items).encode()
    data = body.getvalue()
    return struct.pack("<I", len(head)) + head + struct.pack("<Q", len(data)) + data


def decode(data: bytes) -> tuple:
    (n,) = struct.unpack_from("<I", data, 0)
    items = json.loads(data[4:4 + n])
    (m,) = struct.unpack_from("<Q", data, 4 + n)
    body = data[12 + n:12 + n + m]
    arrays = []
    if m:
        with np.load(io.BytesIO(body), allow_pickle=False) as npz:
            arrays = [npz[f"arr_{i}"] for i in range(len(npz.files))]
    out = []
    for item in items:
        if "b" in item:
            out.append(arrays[item["b"]].tobytes())
        elif "a" in item:
            out.append([arrays[i] for i in item["a"]])
        else:
            out.append(item["j"])
    return tuple(out)


class StreamConn:
    """`send`/`recv` of messages over a pair of binary streams (a child's stdin/stdout),
    the interface `host._serve` expects of a pipe."""

    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer

    def send(self, msg: tuple) -> None:
        data = encode(msg)
        self.writer.write(struct.pack("<Q", len(data)) + data)
        self.writer.flush()

    def recv(self) -> tuple:
        return decode(self.recv_bytes())

    def send_bytes(self, data: bytes) -> None:
        self.writer.write(struct.pack("<Q", len(data)) + data)
        self.writer.flush()

    def recv_bytes(self) -> bytes:
        head = self._exactly(8)
        return self._exactly(struct.unpack("<Q", head)[0])

    def _exactly(self, n: int) -> bytes:
        chunks, left = [], n
        while left:
            chunk = self.reader.read(left)
            if not chunk:
                raise EOFError("the other side closed the stream")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
