import json
import logging

from bot.redaction import Redactor
from bot.runtime import Metrics
from bot.runtime.logs import JsonFormatter, log_context


def _format(record_message: str, redactor: Redactor | None = None) -> dict:
    record = logging.LogRecord("policypal.test", logging.WARNING, __file__, 1, record_message, None, None)
    return json.loads(JsonFormatter(redactor).format(record))


def test_every_line_of_a_run_carries_its_context():
    with log_context(run_id="run_1", conversation="slack:T:C:1.0", platform="slack"):
        line = _format("model call failed")
    assert line["run_id"] == "run_1" and line["platform"] == "slack" and line["conversation"] == "slack:T:C:1.0"
    assert "run_id" not in _format("outside any run")


def test_secrets_are_redacted_and_the_line_stays_valid_json():
    line = _format("calling with token xoxb-1234567890-abcdef and password=hunter22", Redactor(["s3cret-value"]))
    assert "xoxb-1234567890" not in line["message"] and "hunter22" not in line["message"]
    assert _format("key is s3cret-value", Redactor(["s3cret-value"]))["message"] == "key is [redacted]"


def test_metrics_count_runs_by_reason_and_platform_and_observe_latencies():
    metrics = Metrics()
    trace = [
        {"kind": "model", "name": "m", "latency_ms": 120.0},
        {"kind": "tool", "name": "search_policies", "latency_ms": 30},
    ]
    metrics.observe_run("slack", "answered", steps=2, tokens=900, cost=0.0002, trace=trace)
    metrics.set_pending({"open": 3})
    text = metrics.render().decode()
    assert 'policypal_runs_total{platform="slack",reason="answered"} 1.0' in text
    assert 'policypal_tool_latency_seconds_count{tool="search_policies"} 1.0' in text
    assert 'policypal_pending_actions{state="open"} 3.0' in text


def test_the_database_password_is_a_secret_too():
    from bot.config import Settings

    settings = Settings(_env_file=None, database_url="postgresql+asyncpg://bot:pg-s3cret-pw@db:5432/policypal")
    line = _format("could not connect to postgresql+asyncpg://bot:pg-s3cret-pw@db", Redactor(settings.secret_values()))
    assert "pg-s3cret-pw" not in line["message"]
