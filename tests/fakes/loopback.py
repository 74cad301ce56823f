"""What every fake protocol server shares: listening on 127.0.0.1, and running on its own thread.

A fake builds its aiohttp app in ``start()`` and ends with ``return await self._listen(app)``; it is
then usable as ``async with Fake() as fake``, or from sync code and subprocess clients as
``with Fake() as fake`` / ``Fake.start_in_thread()`` ... ``fake.stop()``.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Self

from aiohttp import web


class LoopbackServer:
    _runner: web.AppRunner | None = None
    _port: int = 0
    _thread: threading.Thread | None = None
    _loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> Self:
        raise NotImplementedError

    async def _listen(self, app: web.Application, **runner_options: Any) -> Self:
        """Serve ``app`` on a free loopback port (or the one given)."""
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0, **runner_options)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self._port).start()
        self._port = self._runner.addresses[0][1]
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @classmethod
    def start_in_thread(cls, **kwargs: Any) -> Self:
        """A running server on its own loop in a daemon thread."""
        return cls(**kwargs)._start_thread()

    def stop(self) -> None:
        """Stop a server started with ``start_in_thread`` or ``with``."""
        if self._loop is None or self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(self.close(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop = self._thread = None

    def __enter__(self) -> Self:
        return self if self._thread is not None else self._start_thread()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _start_thread(self) -> Self:
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:  # handed to the starting thread below
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.close()

        name = type(self).__name__
        self._thread = threading.Thread(target=serve, name=name, daemon=True)
        self._thread.start()
        if not ready.wait(timeout=10):
            raise RuntimeError(f"{name} did not start within 10 s")
        if failure:
            raise failure[0]
        return self
