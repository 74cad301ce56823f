"""What a server loads while it already takes messages, so the first question does not wait for it."""

from __future__ import annotations

import gc

import pytest

from adapters.server.app import _warm_up
from bot.models import OpenAIChatModel
from tests.bot.helpers import OnePassage, service
from tests.fakes.openai_server import text

pytestmark = pytest.mark.asyncio


async def test_warming_up_makes_the_model_client_so_the_first_question_does_not_import_the_sdk(tmp_path, fake_openai):
    fake_openai.script(text("Five days."))
    async with service(tmp_path, fake_openai, OnePassage()) as svc:
        model = svc.deps.model
        assert isinstance(model, OpenAIChatModel) and "_client" not in vars(model)  # built, not yet connected
        try:
            await _warm_up(svc)
        finally:
            gc.unfreeze()  # what a server freezes for good would stay uncollected in this test process
        assert "_client" in vars(model) and fake_openai.requests == []  # made, and nothing asked of the API
