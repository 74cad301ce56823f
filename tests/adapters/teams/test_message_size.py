"""Teams' size limit as Teams sees it: the request body the real connector client sends, not the JSON we built.

msrest escapes every non-ASCII character (``\\uXXXX``): Chinese or Japanese is 6 bytes a character on the
wire and an emoji 12, twice what UTF-8 counts. The fake connector measures the raw body (``Recorded.raw``).
"""

from __future__ import annotations

import json

import pytest

from adapters.teams.answers import activity_bytes
from tests.adapters.teams.test_app import Teams
from tests.adapters.teams.test_native_ai import stream_info
from tests.fakes.bot_connector import MESSAGE_BYTES as TEAMS_LIMIT
from tests.fakes.openai_server import text

SENTENCE = "年次有給休暇は入社日から数えて二十五日です🌴。VPN が「NG-809」なら端末を再起動してください🔁。"


def wide_answer(paragraphs: int) -> str:
    return "\n\n".join(f"{n}. " + SENTENCE * 4 for n in range(paragraphs))


@pytest.mark.parametrize("where", ["channel", "personal"])
@pytest.mark.parametrize(
    "paragraphs",
    [28, 90],
    ids=["one message in UTF-8, two on the wire", "many messages"],
)
async def test_a_long_chinese_and_emoji_answer_arrives_in_parts_each_within_teams_limit_on_the_wire(
    teams: Teams, where: str, paragraphs: int
):
    body = wide_answer(paragraphs)
    assert len(json.dumps(body)) > TEAMS_LIMIT  # escaped, as sent: more than one message can hold
    teams.model.script(text(body))
    post = teams.channel.channel_message if where == "channel" else teams.channel.personal_message
    await teams.post(post("有給休暇について全部教えてください"))
    await teams.settle()

    assert teams.channel.violations == []  # no 413 (nor anything else Teams would refuse)
    assert all(len(r.raw) <= TEAMS_LIMIT for r in teams.channel.recorded)  # typing and stream updates too
    messages = teams.channel.messages()
    assert len(messages) >= 2
    assert all(activity_bytes(m.json) == len(m.raw) for m in messages)  # what is counted is what is sent
    assert " ".join(m.text for m in messages).split() == body.split()  # nothing lost
    if where == "personal":  # the run's progress stream is ended by the first part: none is left open
        assert (stream_info(messages[0]) or {}).get("streamType") == "final"
        assert all(s.final is not None for s in teams.channel.streams.values())
