"""Citation sources: a file's path inside its indexed folder, or a link under the base URL; never the server's disk."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from retrieval import Embedder, PolicyIndex, RetrievalConfig
from retrieval.sources import shown_source
from tests.retrieval.conftest import LEAVE_DOC, VPN_DOC

REMOTE = "# Remote work\n\n## Equipment\n\nRemote workers get a monitor and a headset; order them from the IT portal.\n"
LINKED = "---\nurl: https://intranet.example/travel?lang=en\n---\n# Travel\n\nBook trains through the travel desk.\n"
BASE = "https://git.example/handbook/blob/main/"


@pytest.fixture
def handbook(tmp_path: Path) -> Path:
    """A folder laid out as a real one is: nested folders, a space in a name, a document with its own URL."""
    root = tmp_path / "srv" / "policypal" / "handbook"
    for relative, text in [("leave.md", LEAVE_DOC), ("it/vpn.md", VPN_DOC),
                           ("it/how to/remote work.md", REMOTE), ("travel.md", LINKED)]:
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    return root


def sources(cfg: RetrievalConfig, embedder: Embedder, *paths: Path) -> dict[str, str]:
    """Title -> source of every passage a broad search returns, after indexing ``paths``."""
    with PolicyIndex.open(cfg, create=True, embedder=embedder) as index:
        assert index.index_paths(list(paths)).ok
        queries = ["annual leave carry over", "VPN certificate KX-7731", "remote monitor headset", "book trains"]
        return {p.title: p.source for query in queries for p in index.search(query, k=10)}


def test_a_local_folder_is_cited_by_the_path_inside_it(
    cfg: RetrievalConfig, embedder: Embedder, handbook: Path, tmp_path: Path
) -> None:
    """Citations showed /srv/policypal/handbook/people/leave.md: the server's layout, to every reader."""
    found = sources(cfg, embedder, handbook)

    assert found["Annual leave"] == "leave.md"
    assert found["VPN access"] == "it/vpn.md"
    assert found["Remote work"] == "it/how to/remote work.md"
    assert found["Travel"] == "https://intranet.example/travel?lang=en"  # its own URL, as written
    assert not any(str(tmp_path) in source for source in found.values())


def test_with_a_base_url_a_file_is_cited_by_a_link_to_its_published_copy(
    cfg: RetrievalConfig, embedder: Embedder, handbook: Path
) -> None:
    found = sources(replace(cfg, source_base_url=BASE), embedder, handbook)

    assert found["Annual leave"] == "https://git.example/handbook/blob/main/leave.md"
    assert found["Remote work"] == "https://git.example/handbook/blob/main/it/how%20to/remote%20work.md"
    assert found["Travel"] == "https://intranet.example/travel?lang=en"  # a front matter URL wins


def test_a_folder_given_as_a_relative_path_and_a_file_given_alone_show_no_directories(
    cfg: RetrievalConfig, embedder: Embedder, handbook: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(handbook.parent)
    found = sources(cfg, embedder, Path("handbook") / "it", handbook / "leave.md")

    assert found["VPN access"] == "vpn.md"  # `policypal index handbook/it`: inside it, not the typed path
    assert found["Annual leave"] == "leave.md"  # a file indexed on its own is its root


def test_an_index_written_before_files_were_stored_still_shows_no_server_path() -> None:
    """Points from older releases have no `file` (or `root`): the citation falls back, never to the full path."""
    old = {"source": "/srv/policypal/handbook/it/vpn.md", "root": "/srv/policypal/handbook"}
    older = {"source": "/srv/policypal/handbook/it/vpn.md"}

    assert shown_source(old) == "it/vpn.md"
    assert shown_source(older) == "vpn.md"
    assert shown_source(old, BASE) == "https://git.example/handbook/blob/main/it/vpn.md"
    assert shown_source({"source": "https://intranet.example/vpn"}, BASE) == "https://intranet.example/vpn"


def test_a_front_matter_source_that_is_not_a_url_is_shown_as_its_author_wrote_it() -> None:
    point = {"source": "Intranet > People > Leave", "root": "/srv/handbook", "file": "/srv/handbook/leave.md"}

    assert shown_source(point, BASE) == "Intranet > People > Leave"
