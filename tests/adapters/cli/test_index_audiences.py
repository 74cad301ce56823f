"""`policypal index` with POLICYPAL_USER_GROUPS set: an audience naming no configured group fails its file."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.cli import main
from retrieval import PolicyIndex, RetrievalConfig

GROUPS = '{"U7HR": ["hr"], "boss@example.com": ["managers"]}'


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def indexed_audiences(data: Path) -> dict[str, list[str]]:
    cfg = RetrievalConfig(qdrant_path=data / "qdrant", model_cache_dir=data / "models")
    with PolicyIndex.open(cfg) as index:
        passages = index.search("salary bands pay review leave", k=10)
    return {passage.doc_id: list(passage.audience) for passage in passages}


def test_index_fails_a_file_whose_audience_is_not_a_configured_group_and_indexes_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    policies = tmp_path / "policies"
    write(policies / "typo.md", "---\naudience: [hrr]\n---\n# Salary bands\n\nBand 3 pays 70k.\n")
    write(policies / "empty.md", "---\naudience: []\n---\n# Reorg plan\n\nTwo teams merge in May.\n")
    write(policies / "hr.md", "---\naudience: [hr]\n---\n# Pay review\n\nPay is reviewed every April.\n")
    write(policies / "leave.md", "---\naudience: [all]\n---\n# Leave\n\nEveryone has 25 days of leave.\n")
    monkeypatch.setenv("POLICYPAL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("POLICYPAL_USER_GROUPS", GROUPS)

    assert main(["index", str(policies)]) == 1

    out, err = capsys.readouterr()
    assert "added (2): hr.md, leave.md" in out, out
    assert (
        f"failed: {policies / 'typo.md'}: front matter audience `hrr` is not a known group "
        "(known: all, hr, managers): fix it, or nobody in that group can see the document"
    ) in err
    assert f"failed: {policies / 'empty.md'}: front matter `audience` names no group" in err
    assert indexed_audiences(tmp_path / "data") == {"hr.md": ["hr"], "leave.md": ["all"]}


def test_index_with_a_malformed_group_map_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    write(tmp_path / "policies" / "leave.md", "# Leave\n\nEveryone has 25 days of leave.\n")
    monkeypatch.setenv("POLICYPAL_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("POLICYPAL_USER_GROUPS", '["hr"]')

    assert main(["index", str(tmp_path / "policies")]) == 2
    assert "POLICYPAL_USER_GROUPS must be JSON" in capsys.readouterr().err
