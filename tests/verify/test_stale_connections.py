"""A request after a burst of streamed answers from a server that closes each connection a moment after
answering without saying so (llama.cpp's server): every kept-alive connection in the pool may be such a
stale one at once, and each resend consumes one. The request is answered on a fresh connection once the
stale ones are used up, never refused as "cut-off" (a soak's health watch counted that as a health drop).

The close is seen in two ways: as the end of the connection before any answer ("Server disconnected without
sending a response"), or, when the server closes with the new request still unread (on a busy box, llama.cpp's
server often does), as a reset (ECONNRESET: httpx's ReadError). A soak on a loaded 2-core box counted the
reset as a failed request."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest

from rigctl.verify.client import Endpoint, HttpEngine

ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n{\"status\":\"ok\"}"
BURST = 8


@pytest.mark.parametrize("close", ["end", "reset"])
def test_a_request_meeting_only_stale_connections_is_answered(close: str) -> None:
    async def main() -> tuple[int, int]:
        opened = 0
        release = asyncio.Event()

        async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal opened
            opened += 1
            try:
                await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
                await release.wait()  # the burst's answers go out together, so the pool holds them all
                writer.write(ANSWER)
                await writer.drain()
                await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)  # the next request meets the close
                if close == "reset":  # closed as with the request unread: a RST, not a FIN
                    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                                               struct.pack("ii", 1, 0))
            except (asyncio.IncompleteReadError, TimeoutError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(one, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with HttpEngine(Endpoint(f"http://127.0.0.1:{port}", "m"), max_connections=BURST) as engine:
            burst = [asyncio.create_task(engine.get("/health", timeout=10)) for _ in range(BURST)]
            while opened < BURST:
                await asyncio.sleep(0.01)
            release.set()
            assert {a.status for a in await asyncio.gather(*burst)} == {200}
            after = await engine.get("/health", timeout=10)  # every pooled connection is stale now
        server.close()
        await server.wait_closed()
        return after.status, opened

    status, opened = asyncio.run(main())
    assert status == 200 and opened > BURST
