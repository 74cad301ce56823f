"""Tool results as the model reads them: bounded, and still valid JSON."""

import json

import pytest

from bot.agent.turn import bounded_json

RESULTS_WITHOUT_A_LIST = {
    "quotes": {"rows": [{"name": "x", "value": "y"}] * 500},  # each quote is escaped when wrapped
    "non-ascii": {"text": "Überstunden werden vergütet. 日本語 " * 300},
    "backslashes": {"path": "C:\\Users\\share\\" * 500},
}


@pytest.mark.parametrize("result", RESULTS_WITHOUT_A_LIST.values(), ids=RESULTS_WITHOUT_A_LIST.keys())
def test_a_capped_result_fits_the_limit_whatever_its_characters(result):
    content = bounded_json(result, 4_000)
    assert len(content) <= 4_000
    capped = json.loads(content)
    assert "…[truncated: " in capped["truncated"]
    assert len(capped["partial"]) > 1_000  # cut to fit, not emptied


def test_a_passage_longer_than_the_limit_is_cut_not_dropped():
    best = {
        "cite": "Leave Policy › Annual leave",
        "source": "https://intranet.example/leave",
        "score": 0.99,
        "text": "Annual leave grows with your length of service. " * 40,
    }
    result = {"results": [best, {**best, "score": 0.5}]}
    content = bounded_json(result, 400)
    assert len(content) <= 400
    observation = json.loads(content)
    (passage,) = observation["results"]  # the best one, never an empty result ("not in the policy")
    assert (passage["cite"], passage["score"]) == (best["cite"], 0.99)
    assert 50 < len(passage["text"]) < len(best["text"]) and best["text"].startswith(passage["text"])
    assert passage["cut"] is True
    assert "…[truncated: " in observation["truncated"]
