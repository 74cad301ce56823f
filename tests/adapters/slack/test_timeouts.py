"""Every Slack Web API call has a deadline: slack_sdk applies its own ``timeout`` only to sessions it
makes, so the session PolicyPal shares between calls carries it. Without it a call Slack never answers
waits aiohttp's default five minutes, holding an outbox write or a reply's member-list read."""

from __future__ import annotations

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError

from adapters.slack.app import SlackCredentials, start_slack
from adapters.slack.post import API_TIMEOUT_S, slack_session, web_client
from bot.identity import GroupMap
from bot.wiring import open_service
from tests.adapters.slack.test_app import PASSAGE
from tests.bot.helpers import OnePassage, settings_for
from tests.fakes.slack_api import FakeSlackAPI

pytestmark = pytest.mark.asyncio


@pytest.mark.timeout(60)  # a hang guard: without a deadline the call below waits for the fake's 120 s
async def test_a_call_slack_does_not_answer_gives_up_at_the_sessions_deadline() -> None:
    async with FakeSlackAPI() as slack, slack_session(timeout_s=0.5) as session:
        slack.slow("chat.postMessage", 120)
        client = web_client(slack.token, session, slack.base_url)
        with pytest.raises((TimeoutError, aiohttp.ClientError, SlackApiError)):
            await client.chat_postMessage(channel="C1", text="hello")
        assert [call.method for call in slack.calls_to("chat.postMessage")][:1] == ["chat.postMessage"]


async def test_the_slack_runtime_shares_a_session_with_the_api_deadline(tmp_path, fake_openai) -> None:
    async with FakeSlackAPI() as fake_slack:
        service = await open_service(settings_for(tmp_path, fake_openai), searcher=OnePassage(PASSAGE))
        credentials = SlackCredentials(fake_slack.token, None, "xapp-1-A0APP-123-abc", fake_slack.base_url)
        runtime = await start_slack(service, credentials, GroupMap(), connect=False)
        try:
            assert runtime.session.timeout.total == API_TIMEOUT_S
        finally:
            await runtime.close(1.0)
            await service.close()
