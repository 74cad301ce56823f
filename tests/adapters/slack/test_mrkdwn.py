"""Markdown from the model becomes Slack mrkdwn: emphasis, lists, links, code, escaping."""

from __future__ import annotations

import pytest

from adapters.slack.mrkdwn import to_mrkdwn


@pytest.mark.parametrize(
    ("markdown", "mrkdwn"),
    [
        ("**Yes**, you *may* work ~~abroad~~ remotely.", "*Yes*, you _may_ work ~abroad~ remotely."),
        ("__bold__ too", "*bold* too"),
        ("_it_ too", "_it_ too"),
        # Bold italic: Slack's form is bold outside, italic inside.
        ("***both***", "*_both_*"),
        ("___both___", "*_both_*"),
        ("**_both_** and __*both*__", "*_both_* and *_both_*"),
        ("***bold italic*** then **bold** and *it*.", "*_bold italic_* then *bold* and _it_."),
        ("a ***b*** c ***d e***!", "a *_b_* c *_d e_*!"),
        (
            "***Note:*** see [the policy](https://intranet.example.com/remote).",
            "*_Note:_* see <https://intranet.example.com/remote|the policy>.",
        ),
        ("Run `***x***` as ***shown***", "Run `***x***` as *_shown_*"),  # code stays code
        ("2 *** 3 stays", "2 *** 3 stays"),  # lone stars are no span
        # Paired as CommonMark pairs them, not by the order of rules
        ("***a** b*", "_*a* b_"),  # italic around bold: was the mis-nested *_a* b_
        ("**a *b* c** and **a *b***", "*a _b_ c* and *a _b_*"),
        ("*a **b** c* and ***a** b*", "_a *b* c_ and _*a* b_"),
        # Slack shows no emphasis inside a word, so there the Markdown stays as written.
        ("snake_case_name, _a_b_ and 2*3*4 stay; a**b**c too", "snake_case_name, _a_b_ and 2*3*4 stay; a**b**c too"),
        ("Run `a\n**b` and **c**", "Run `a **b` and *c*"),  # a code span may wrap a line; its ** stays code
        ("**See [the *remote* policy](https://x.example.com)**", "*See <https://x.example.com|the _remote_ policy>*"),
        ("[**Remote** policy](https://x.example.com)", "<https://x.example.com|*Remote* policy>"),
        ("## **Working** abroad", "*Working abroad*"),  # a heading is bold already
    ],
)
def test_bold_italic_and_strike_use_slack_markers(markdown: str, mrkdwn: str):
    assert to_mrkdwn(markdown) == mrkdwn


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


def test_inline_code_in_a_link_label_stays_code():
    assert to_mrkdwn("Edit [`vpn.conf`](https://x/vpn) now") == "Edit <https://x/vpn|`vpn.conf`> now"
    assert to_mrkdwn("[`a|b`](https://x.example.com)") == "<https://x.example.com|`a¦b`>"  # | would end the label
    assert to_mrkdwn("See [`leave.md`](policies/leave.md).") == "See `leave.md` (policies/leave.md)."


def test_a_link_target_keeps_its_balanced_parentheses():
    assert to_mrkdwn("See [Wiki](https://en.wikipedia.org/wiki/Foo_(bar)) now") == (
        "See <https://en.wikipedia.org/wiki/Foo_(bar)|Wiki> now"
    )


def test_emphasis_never_reaches_inside_a_bare_url_but_still_closes_after_one():
    url = "https://intranet.example.com/__init__/x__y?q=a*b*c"
    assert to_mrkdwn(f"Open {url} now") == f"Open {url} now"
    assert to_mrkdwn("**Portal: https://intranet.example.com/a_b**.") == "*Portal: https://intranet.example.com/a_b*."
    assert to_mrkdwn("R&D https://x.example.com/?a=1&b=2") == "R&amp;D https://x.example.com/?a=1&amp;b=2"
    assert to_mrkdwn("snake__case__word but __bold__") == "snake__case__word but *bold*"


def test_an_autolink_cannot_hide_its_target_behind_a_slack_label():
    assert to_mrkdwn("<https://evil.example|VPN>") == "<https://evil.example%7CVPN>"


def test_a_link_target_cannot_smuggle_a_channel_ping_or_a_second_token():
    assert to_mrkdwn("[hi](https://a.example/<!channel>)") == "<https://a.example/%3C!channel%3E|hi>"
    # Neither is a link in CommonMark (a <...> target or an autolink cannot hold a "<"): shown as text.
    assert to_mrkdwn("[hi](<https://a.example/<!here>)") == "[hi](&lt;https://a.example/&lt;!here&gt;)"
    assert to_mrkdwn("<https://a.example<!channel>") == "&lt;https://a.example&lt;!channel&gt;"


# Emphasis is paired as CommonMark pairs it, then written in Slack's marks. Where the simple form of a case
# already came out right, it is tested beside the form of it the regex converter got wrong.
def test_nested_lists_keep_their_levels_also_in_a_quote():
    md = "- **Ask** first\n  1. in writing\n  2. by email\n- Book\n\n> - quoted\n>   - nested"
    assert to_mrkdwn(md) == "• *Ask* first\n  1. in writing\n  2. by email\n• Book\n\n> • quoted\n>   • nested"


def test_links_the_regexes_missed():
    md = "See [leave][1], ![](https://x.example.com/map.png) or <it@example.com>.\n\n[1]: https://x.example.com/leave"
    assert to_mrkdwn(md) == (
        "See <https://x.example.com/leave|leave>, <https://x.example.com/map.png> or <mailto:it@example.com>."
    )


@pytest.mark.parametrize(
    ("markdown", "kept"),
    [
        ("See [leave][1].\n\n[1]: https://x.example.com/leave\n[2]: https://y.example.com/pay", "y.example.com/pay"),
        ("> " * 30 + "deep in quotes", "deep in quotes"),  # past markdown-it's default nesting of 20
        ("- " * 30 + "deep in lists", "deep in lists"),
        ("*" * 493 + "a" + "*" * 493, "a"),  # deeper than a syntax tree can be built: shown as written
        ("*a " * 250 + "b*" * 250, "b"),
    ],
)
def test_nothing_the_model_wrote_is_lost_or_raises(markdown: str, kept: str):
    assert kept in to_mrkdwn(markdown)


def test_markdown_too_deep_to_convert_is_sent_as_written_and_logged(caplog):
    with caplog.at_level("WARNING", logger="adapters.slack.mrkdwn"):
        assert to_mrkdwn("*" * 493 + "a" + "*" * 493) == "*" * 493 + "a" + "*" * 493
    assert "nested too deep" in caplog.text
