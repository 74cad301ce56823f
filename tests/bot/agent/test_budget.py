import pytest

from bot.agent import Budget, Budgets, CallAllowance, Price, PriceTable, Spent, estimate_tokens
from bot.agent.budget import HistoryMeter
from bot.errors import UnknownPrice
from bot.types import TerminationReason, Usage

GPT_4O_MINI = Price(0.15, 0.60)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_step_budget_stops_the_call_after_the_last_allowed_step():
    budget = Budget(Budgets(max_steps=2), GPT_4O_MINI)
    budget.record(Usage(10, 10))
    assert isinstance(budget.check(100, 100), CallAllowance)
    budget.record(Usage(10, 10))
    assert budget.check(100, 100) == TerminationReason.STEP_BUDGET


def test_token_budget_counts_the_projected_input_before_the_call():
    budget = Budget(Budgets(max_tokens=1_000), GPT_4O_MINI, Spent(input_tokens=600, output_tokens=100))
    assert budget.check(350, 800) == TerminationReason.TOKEN_BUDGET


def test_output_cap_shrinks_to_the_tokens_left_so_a_call_never_overshoots():
    budget = Budget(Budgets(max_tokens=1_000), GPT_4O_MINI, Spent(input_tokens=500))
    allowance = budget.check(300, 800)
    assert isinstance(allowance, CallAllowance)
    assert allowance.max_output_tokens == 200


def test_cost_budget_projects_this_calls_input_and_max_output():
    price = Price(1_000.0, 1_000.0)  # $0.001 per token: easy arithmetic
    budget = Budget(Budgets(max_cost_usd=0.5, max_tokens=10**6), price, Spent(cost_usd=0.2))
    assert isinstance(budget.check(100, 100), CallAllowance)  # 0.2 + 0.2 <= 0.5
    assert budget.check(200, 200) == TerminationReason.COST_BUDGET  # 0.2 + 0.4 > 0.5


def test_no_dollar_cap_means_cost_is_tracked_but_never_stops_a_run():
    budget = Budget(Budgets(max_cost_usd=None), Price(1e6, 1e6))
    assert isinstance(budget.check(100, 100), CallAllowance)
    assert budget.record(Usage(1, 1)) == pytest.approx(2.0)


def test_deadline_leaves_each_call_only_the_time_left():
    clock = FakeClock()
    budget = Budget(Budgets(deadline_s=10), GPT_4O_MINI, clock=clock)
    clock.now += 7
    allowance = budget.check(10, 10)
    assert isinstance(allowance, CallAllowance)
    assert allowance.timeout_s == pytest.approx(3)
    clock.now += 3
    assert budget.check(10, 10) == TerminationReason.DEADLINE


def test_price_table_matches_dated_model_variants_and_user_extensions():
    table = PriceTable.from_json('{"my-vllm-model": [0, 0]}')
    assert table.lookup("gpt-4o-mini-2024-07-18") == GPT_4O_MINI
    assert table.require("my-vllm-model") == Price(0, 0)


def test_unknown_model_price_fails_closed_with_a_fix_in_the_message():
    with pytest.raises(UnknownPrice, match="POLICYPAL_MODEL_PRICES"):
        PriceTable().require("mystery-model")


@pytest.mark.parametrize(
    "prices",
    [
        '{"x": 3}',
        '{"x": [NaN, 1]}',  # NaN cost is never over a cap: the dollar budget would be silently off
        '{"x": [0.5, Infinity]}',
        '{"x": [-1, 2]}',  # a negative cost would give a run more allowance with every call
        '{"x": [1, 2, 3]}',
        '{"x": [true, 1]}',
        '["x", 1, 2]',
    ],
)
def test_malformed_price_json_is_a_clear_error(prices: str):
    with pytest.raises(ValueError, match="POLICYPAL_MODEL_PRICES must be JSON"):
        PriceTable.from_json(prices)


def test_a_japanese_request_is_estimated_near_a_token_a_character_as_tokenizers_count_it():
    """Characters would count a Japanese question a third of its tokens, and let a run overshoot its budget."""
    japanese = [{"role": "user", "content": "有給休暇は何日ありますか。" * 80}]  # 1,040 characters
    english = [{"role": "user", "content": "How many days of annual leave? " * 34}]  # 1,054 characters
    assert estimate_tokens(japanese) >= 0.8 * 1_040 and estimate_tokens(english) < 0.4 * 1_054
    assert HistoryMeter().tokens(japanese) == estimate_tokens(japanese)  # the per-turn meter counts the same
