"""Markdown from the model becomes Slack mrkdwn: emphasis, lists, links, code, escaping."""

from __future__ import annotations

from adapters.slack_mrkdwn import to_mrkdwn


def test_bold_italic_and_strike_use_slack_markers():
    assert to_mrkdwn("**Yes**, you *may* work ~~abroad~~ remotely.") == "*Yes*, you _may_ work ~abroad~ remotely."
    assert to_mrkdwn("__bold__ too") == "*bold* too"


def test_bold_inside_a_bullet_list_and_nested_items():
    md = "Steps:\n- **Ask** your manager\n  - in writing\n* Book travel\n1. numbered stays"
    assert to_mrkdwn(md) == "Steps:\n• *Ask* your manager\n  • in writing\n• Book travel\n1. numbered stays"


def test_headings_become_bold_lines():
    assert to_mrkdwn("## Working abroad\nUp to 4 weeks.") == "*Working abroad*\nUp to 4 weeks."


def test_links_become_slack_links_and_relative_targets_are_shown_not_broken():
    assert to_mrkdwn("See [the policy](https://intranet.example.com/remote).") == (
        "See <https://intranet.example.com/remote|the policy>."
    )
    assert to_mrkdwn("See [leave](policies/leave.md).") == "See leave (policies/leave.md)."
    assert to_mrkdwn("Mail <mailto:it@example.com>") == "Mail <mailto:it@example.com>"


def test_citation_markers_stay_as_written():
    text = "You may work abroad for 4 weeks [Remote Work Policy › Working abroad]."
    assert to_mrkdwn(text) == text


def test_ampersands_and_angle_brackets_are_escaped_so_slack_shows_them():
    assert to_mrkdwn("R&D <team> gets 5 > 4") == "R&amp;D &lt;team&gt; gets 5 &gt; 4"


def test_code_is_left_alone_apart_from_escaping_and_the_fence_language_is_dropped():
    md = "Run `**not bold**` then:\n```bash\nvpn --reset <id> && echo *ok*\n```"
    assert to_mrkdwn(md) == "Run `**not bold**` then:\n```\nvpn --reset &lt;id&gt; &amp;&amp; echo *ok*\n```"


def test_an_unclosed_fence_is_closed():
    assert to_mrkdwn("```\ncode").endswith("```")


def test_blockquotes_keep_their_marker_and_rules_disappear():
    assert to_mrkdwn("> quoted **text**\n---\nafter") == "> quoted *text*\n\nafter"


def test_snake_case_and_lone_asterisks_are_not_emphasis():
    assert to_mrkdwn("set max_retry_count to 2 * 3") == "set max_retry_count to 2 * 3"
