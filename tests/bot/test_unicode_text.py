"""Chat text reaches databases, HTTP bodies and operators' terminals: it must be storable and inert."""

from __future__ import annotations

import io

from adapters.cli.traces import show_traces
from bot.unicode_text import clean_text, terminal_safe
from tests.bot.helpers import ask, service, settings_for
from tests.fakes.openai_server import text as answer

ESCAPES = "\x1b]0;PWNED\x07\x1b[2Kfine\rforged\x9b1m"


def test_inbound_text_loses_control_characters_and_keeps_its_lines():
    assert clean_text(f"a\tb\r\nc {ESCAPES}") == "a\tb\nc ]0;PWNED[2Kfine\nforged1m"
    assert clean_text("plain text") == "plain text"


def test_terminal_output_shows_control_characters_instead_of_obeying_them():
    assert terminal_safe("a\tb\nc\r\n\x1b[2K\x9b") == "a\tb\nc\n\\x1b[2K\\x9b"


async def test_a_question_is_stored_without_its_control_characters(tmp_path, fake_openai, sample_index):
    fake_openai.script(answer("See the VPN guide."))
    async with service(tmp_path, fake_openai, sample_index) as svc:
        reply = await ask(svc, f"vpn error {ESCAPES}")
        row = await svc.store.runs.get(reply.run_id)
    assert row.question == "vpn error ]0;PWNED[2Kfine\nforged1m"


async def test_traces_show_control_characters_stored_earlier_as_text(tmp_path, fake_openai, sample_index):
    async with service(tmp_path, fake_openai, sample_index) as svc:  # as a release before the cleaning stored it
        await svc.store.runs.start("run_old", "console:t", "console", "U_ALICE", f"vpn {ESCAPES}", "m", "p")
    shown = io.StringIO()
    assert await show_traces(settings_for(tmp_path, fake_openai), None, out=shown) == 0
    assert "\x1b" not in shown.getvalue() and "\x07" not in shown.getvalue() and "\r" not in shown.getvalue()
    assert "\\x1b]0;PWNED\\x07" in shown.getvalue()
