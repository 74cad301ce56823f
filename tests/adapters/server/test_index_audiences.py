"""`policypal index` during `policypal serve`: the server checks audiences against its own configured groups."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiohttp import web

from adapters.cli.main import _index
from adapters.server import build_app
from bot.wiring import open_service
from tests.bot.helpers import settings_for

pytestmark = pytest.mark.asyncio

LEAVE = "# Leave\n\nEveryone has 25 days of leave a year.\n"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


async def test_index_through_the_server_fails_a_file_whose_audience_is_not_a_configured_group(
    tmp_path, fake_openai, capsys
):
    settings = settings_for(tmp_path, fake_openai, user_groups='{"U7HR": ["hr"]}')
    write(tmp_path / "policies" / "leave.md", LEAVE)
    assert await asyncio.to_thread(_index, settings, [str(tmp_path / "policies")]) == 0
    more = tmp_path / "more"
    write(more / "typo.md", "---\naudience: [hrr]\n---\n# Salary bands\n\nBand 3 pays 70k.\n")
    write(more / "hr.md", "---\naudience: [hr]\n---\n# Pay review\n\nPay is reviewed every April.\n")
    service = await open_service(settings)
    runner = web.AppRunner(build_app(settings, service))
    await runner.setup()
    try:
        capsys.readouterr()
        code = await asyncio.to_thread(_index, settings, [str(more)])
        out, err = capsys.readouterr()
        passages = await service.searcher.asearch("salary bands and pay review", 5)
    finally:
        await runner.cleanup()
        await service.close()

    assert code == 1
    assert "indexed by the running `policypal serve`" in err
    assert "added (1): hr.md" in out
    assert f"failed: {more / 'typo.md'}: front matter audience `hrr` is not a known group (known: all, hr)" in err
    found = {passage.doc_id for passage in passages}
    assert "hr.md" in found and "typo.md" not in found
