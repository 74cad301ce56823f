"""`policypal index` while `policypal serve` holds the embedded index: it goes through the server."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import threading

import aiohttp
import pytest
from aiohttp import web

from adapters.cli.index import run_index
from adapters.cli.main import _index
from adapters.control import INDEX, forward_index, socket_path
from adapters.server import build_app
from bot.wiring import open_service
from tests.adapters.control.conftest import BIKES, LEAVE, write
from tests.bot.helpers import settings_for

pytestmark = pytest.mark.asyncio


async def test_index_during_serve_is_done_by_the_server_and_searchable_at_once(server, tmp_path, capsys):
    settings, service = server.settings, server.service
    more = write(tmp_path / "more", "bikes.md", BIKES)

    code = await asyncio.to_thread(_index, settings, [str(more)])

    out, err = capsys.readouterr()
    assert code == 0
    assert "indexed by the running `policypal serve`" in err
    assert "added (1): bikes.md" in out
    passages = await service.searcher.asearch("is there a cycle to work scheme", 3)
    assert passages and passages[0].doc_id == "bikes.md"


async def test_remove_during_serve_is_done_by_the_server_even_for_a_folder_that_is_gone(server, tmp_path, capsys):
    settings, service = server.settings, server.service
    more = write(tmp_path / "more", "bikes.md", BIKES)
    assert await asyncio.to_thread(_index, settings, [str(more)]) == 0
    (more / "bikes.md").unlink()
    more.rmdir()

    code = await asyncio.to_thread(lambda: _index(settings, [str(more)], remove=True))

    out, err = capsys.readouterr()
    assert code == 0, err
    assert "removed by the running `policypal serve`" in err and "removed (1): bikes.md" in out
    assert not await service.searcher.asearch("is there a cycle to work scheme", 3)
    assert await service.searcher.asearch("how many unused days can I carry over", 3)


async def test_the_socket_is_for_its_owner_only_and_gone_after_shutdown(tmp_path, fake_openai):
    settings = settings_for(tmp_path, fake_openai)
    assert run_index(settings.retrieval(), [write(tmp_path / "policies", "leave.md", LEAVE)]) == 0
    service = await open_service(settings)
    runner = web.AppRunner(build_app(settings, service))
    await runner.setup()
    path = socket_path(settings.retrieval())
    try:
        assert stat.S_ISSOCK(path.stat().st_mode) and stat.S_IMODE(path.stat().st_mode) == 0o600
    finally:
        await runner.cleanup()
        await service.close()
    assert not path.exists()


async def test_a_server_shutting_down_stops_indexing_between_batches_and_says_so(
    tmp_path, fake_openai, capsys, monkeypatch
):
    # SIGTERM during `policypal index` through the server waited for the whole folder to embed.
    settings = settings_for(tmp_path, fake_openai)
    assert run_index(settings.retrieval(), [write(tmp_path / "policies", "leave.md", LEAVE)]) == 0
    service = await open_service(settings)
    embedder = service.searcher._index.embedder
    embed, first_batch_started = embedder.embed_documents, asyncio.Event()
    events: list[str] = []  # embedding batches begun and the server's stop, in the order they happened
    stopped = threading.Event()
    loop = asyncio.get_running_loop()

    def embed_after_the_stop(texts):  # type: ignore[no-untyped-def]
        events.append("batch")
        if len(events) == 1:  # the shutdown begins while the first batch is embedding, and it ends after
            loop.call_soon_threadsafe(first_batch_started.set)
            stopped.wait(30)  # a hang guard only: a server that never stops indexing goes on after it
        return embed(texts)

    stop_writes = service.searcher.stop_writes

    def recorded_stop() -> None:
        events.append("stop")
        stop_writes()
        stopped.set()

    embedder.embed_documents = embed_after_the_stop
    monkeypatch.setattr(service.searcher, "stop_writes", recorded_stop)
    many = tmp_path / "many"
    for n in range(80):  # five batches of 16
        write(many, f"policy-{n}.md", f"# Policy {n}\n\nRule {n} says to file form F-{n} within {n} days.\n")
    runner = web.AppRunner(build_app(settings, service))
    await runner.setup()
    try:
        indexing = asyncio.create_task(asyncio.to_thread(_index, settings, [str(many)]))
        await asyncio.wait_for(first_batch_started.wait(), 30)
        await runner.cleanup()  # what SIGTERM does
        code = await indexing
    finally:
        await service.close()
    _out, err = capsys.readouterr()
    # The batch in flight finished and no other began: one of the five the folder needs, not all of them
    # (a shutdown waiting for the folder reads five "batch"; one that stopped late, a "batch" after "stop").
    assert events == ["batch", "stop"] and code != 0
    assert "the server is shutting down" in err and "run `policypal index` again" in err


async def test_bad_requests_get_a_clear_error(server):
    settings = server.settings
    connector = aiohttp.UnixConnector(path=str(socket_path(settings.retrieval())))
    async with aiohttp.ClientSession(connector=connector) as session:
        relative = "`paths.0` must be an absolute path (the server does not know the command's working directory)"
        for body, said in (
            ({"paths": "relative/dir"}, "`paths` should be a valid list"),
            ({"paths": ["relative/dir"]}, relative),
            ({"paths": []}, "`paths` must not be empty"),
            ({"nothing": 1}, "`paths` is missing"),
            ({"paths": ["/x"], "remove": "yes"}, "`remove` should be a valid boolean"),
        ):
            async with session.post(f"http://localhost{INDEX}", json=body) as response:
                assert (response.status, (await response.json())["error"]) == (400, said), body


async def test_a_socket_left_by_a_killed_server_is_ignored_and_the_cli_indexes_itself(tmp_path, fake_openai):
    settings = settings_for(tmp_path, fake_openai)
    cfg = settings.retrieval()
    assert run_index(cfg, [write(tmp_path / "policies", "leave.md", LEAVE)]) == 0
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(socket_path(cfg)))  # bound, never listening, never unlinked: as a SIGKILL leaves it
    stale.close()
    socket_path(cfg).chmod(0o600)  # as our server made it

    assert await asyncio.to_thread(forward_index, cfg, [tmp_path / "policies"]) is None  # as the CLI calls it
    assert await asyncio.to_thread(_index, settings, [str(write(tmp_path / "more", "bikes.md", BIKES))]) == 0


async def test_a_socket_that_cannot_be_created_is_logged_and_the_server_still_starts(tmp_path, fake_openai, caplog):
    settings = settings_for(tmp_path, fake_openai)
    cfg = settings.retrieval()
    assert run_index(cfg, [write(tmp_path / "policies", "leave.md", LEAVE)]) == 0
    socket_path(cfg).mkdir()  # a directory where the socket should go: binding fails
    service = await open_service(settings)
    runner = web.AppRunner(build_app(settings, service))
    try:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
    finally:
        await runner.cleanup()
        await service.close()
    assert "cannot listen on" in caplog.text


async def test_a_folder_with_nothing_to_index_leaves_the_served_index_alone(server, tmp_path, capsys):
    settings, service = server.settings, server.service
    chunks = await service.searcher.ping()
    (tmp_path / "policies" / "leave.md").unlink()  # the indexed folder is now empty

    code = await asyncio.to_thread(_index, settings, [str(tmp_path / "policies")])

    assert code == 1
    assert "No documents to index in" in capsys.readouterr().err
    assert chunks > 0 and await service.searcher.ping() == chunks  # leave.md was not removed


async def test_an_unreadable_answer_on_the_socket_is_reported_not_a_traceback(tmp_path, fake_openai, capsys):
    settings = settings_for(tmp_path, fake_openai)
    path = socket_path(settings.retrieval())
    path.parent.mkdir(parents=True)

    async def not_json(request: web.Request) -> web.Response:
        return web.Response(text="<html>not json</html>")

    app = web.Application()
    app.router.add_post(INDEX, not_json)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.UnixSite(runner, str(path)).start()
    path.chmod(0o600)  # ours, as the server makes it
    try:
        code = await asyncio.to_thread(_index, settings, [str(write(tmp_path / "more", "bikes.md", BIKES))])
    finally:
        await runner.cleanup()
    assert code == 1
    assert "gave an unreadable answer" in capsys.readouterr().err


@pytest.mark.parametrize("planted", ["open to others", "another user's"])
async def test_a_socket_we_did_not_make_is_refused_and_gets_no_paths(tmp_path, fake_openai, planted, capsys):
    settings = settings_for(tmp_path, fake_openai)
    cfg = settings.retrieval()
    assert run_index(cfg, [write(tmp_path / "policies", "leave.md", LEAVE)]) == 0
    received: list[bytes] = []

    async def impostor(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await reader.read(65536))
        body = b'{"text": "Indexed!", "ok": true}'
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
        writer.write(head + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_unix_server(impostor, path=str(socket_path(cfg)))
    if planted == "open to others":
        socket_path(cfg).chmod(0o666)
    else:
        socket_path(cfg).chmod(0o600)
        os.chown(socket_path(cfg), 12345, -1)  # we run tests as root, so we can hand it to another user
    try:
        more = write(tmp_path / "secret-hr", "bonus.md", BIKES)
        code = await asyncio.to_thread(_index, settings, [str(more)])
    finally:
        server.close()
        await server.wait_closed()
    err = capsys.readouterr().err
    assert code == 1 and received == []
    assert f"Refusing the control socket {socket_path(cfg)}: " in err
