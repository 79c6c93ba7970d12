"""A 127.0.0.1 HTTP server answering every request with fixed bytes, for transport tests.

It reads each request whole (head and ``Content-Length`` body) and keeps it in ``requests``.
By default it answers once and hangs up (``reply`` None: hangs up without answering; with
``stall_s``: waits first); ``keep_alive`` answers every request on a connection instead.
``drip_s`` sends the reply one byte at a time, that many seconds apart; ``filler`` follows the
reply with that many more bytes (a large body), stopping when the client hangs up. ``sent``
counts the bytes written.
"""

from __future__ import annotations

import asyncio


class RawServer:
    def __init__(self, reply: bytes | None, *, stall_s: float = 0.0, keep_alive: bool = False,
                 drip_s: float = 0.0, filler: int = 0) -> None:
        self.reply, self.stall_s, self.keep_alive = reply, stall_s, keep_alive
        self.drip_s, self.filler = drip_s, filler
        self.requests: list[bytes] = []
        self.sent = 0

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                self.requests.append(head + await reader.readexactly(length))
                await asyncio.sleep(self.stall_s)
                if self.reply is not None:
                    await self._send(writer)
                if not self.keep_alive:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    async def _send(self, writer: asyncio.StreamWriter) -> None:
        assert self.reply is not None
        if self.drip_s:
            for i in range(len(self.reply)):
                writer.write(self.reply[i:i + 1])
                await writer.drain()
                self.sent += 1
                await asyncio.sleep(self.drip_s)
        else:
            writer.write(self.reply)
            await writer.drain()
            self.sent += len(self.reply)
        block = b"x" * 65536
        left = self.filler
        while left > 0:
            writer.write(block[:left])
            await writer.drain()
            self.sent += min(left, len(block))
            left -= len(block)
