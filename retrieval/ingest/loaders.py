"""Load policy files into Documents whose bodies are normalised Markdown.

One bad file never stops a load: it becomes a LoadFailure with a reason and the rest carry on.
A file whose body repeats an earlier one is skipped and listed in ``LoadReport.duplicates``.
"""

from __future__ import annotations

import datetime as dt
import difflib
import hashlib
import json
import os
import re
import tomllib
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from retrieval.errors import ExtractError, NoBodyText
from retrieval.ingest.extractors import docx_to_markdown, pdf_to_markdown
from retrieval.ingest.html import convert_embedded_html, html_to_markdown
from retrieval.ingest.markdown import normalise_markdown
from retrieval.ingest.templating import strip_templates
from retrieval.paths import real_path
from retrieval.types import Document, LoadFailure, LoadReport

MAX_FILE_BYTES = 50 * 1024 * 1024
_FORMATS = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
    ".docx": "docx",
}
# Opening fence -> the whole block: YAML between --- lines, or TOML between +++ lines (Hugo).
_FRONT_MATTER = {
    "---": re.compile(r"---[ \t]*\n(.*?)^(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.DOTALL | re.MULTILINE),
    "+++": re.compile(r"\+\+\+[ \t]*\n(.*?)^\+\+\+[ \t]*(?:\n|\Z)", re.DOTALL | re.MULTILINE),
}
_H1 = re.compile(r"^# (.+)$", re.MULTILINE)
_FENCED = re.compile(r"^(`{3,})(?!`).*?^\1`*[ \t]*$", re.MULTILINE | re.DOTALL)  # closed by as long a fence


@dataclass(frozen=True)
class _Candidate:
    path: Path  # as the caller named it, joined with the relative path for directory walks
    doc_id: str  # the default id: relative to the directory given, or the bare file name


@dataclass(frozen=True)
class _Meta:
    title: str | None = None
    url: str | None = None
    section: str | None = None
    audience: tuple[str, ...] = ()
    doc_id: str | None = None
    classification: str | None = None  # "confidential": shown as the citation's sensitivity label


@dataclass(frozen=True)
class _Parsed:
    text: str  # normalised Markdown
    meta: _Meta
    title_hint: str | None = None  # a format's own title (<title>, PDF/DOCX metadata)
    note: str | None = None


def load_documents(paths: Sequence[Path], *, known_groups: Collection[str] | None = None) -> LoadReport:
    """Load files and directories (recursively, sorted, hidden entries skipped) into one report.

    ``known_groups``: the configured group names an audience may use ("all", the public tag, always may);
    a file naming any other fails, since nobody in that group could read it. None: any name (no groups).
    """
    report = LoadReport()
    bodies: dict[str, str] = {}  # body key -> doc_id of the first document with that body
    owners: dict[str, Path] = {}  # doc_id -> path that holds it
    known = frozenset({*known_groups, "all"}) if known_groups is not None else None
    for given in paths:
        for candidate in _candidates(Path(given), report):
            _load_one(candidate, report, bodies, owners, known)
    return report


def _candidates(given: Path, report: LoadReport) -> Iterator[_Candidate]:
    if given.is_dir():
        yield from _walk(given, report)
    elif not given.exists():
        report.failures.append(LoadFailure(given, "no such file or directory"))
    elif not given.is_file():
        report.failures.append(LoadFailure(given, "not a regular file"))
    elif given.suffix.lower() not in _FORMATS:
        supported = " ".join(sorted(_FORMATS))
        report.failures.append(LoadFailure(given, f"unsupported file type {given.suffix!r} ({supported})"))
    else:
        yield _Candidate(given, given.name)


def _walk(root: Path, report: LoadReport) -> Iterator[_Candidate]:
    """Supported files under ``root`` in sorted relative-path order; other files are not policies.

    Symlinked directories are not followed (a link can loop, or pull in half the disk); each is noted.
    A named pipe, socket or device with a policy's name is a failure, as when it is given by name:
    reading a pipe waits for a writer forever.
    """
    found: list[str] = []
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = [name for name in subdirs if not name.startswith(".")]
        for name in subdirs:
            if os.path.islink(os.path.join(directory, name)):
                report.notes.append((Path(directory) / name, "skipped: a symlinked directory (links are not followed)"))
        base = Path(directory).relative_to(root)
        for name in filter(_wanted, files):
            path = Path(directory) / name
            if path.exists() and not path.is_file():
                report.failures.append(LoadFailure(path, "not a regular file"))
            else:
                found.append((base / name).as_posix())
    for relative in sorted(found):
        yield _Candidate(root / relative, relative)


def _wanted(name: str) -> bool:
    return not name.startswith(".") and Path(name).suffix.lower() in _FORMATS


def _load_one(
    candidate: _Candidate,
    report: LoadReport,
    bodies: dict[str, str],
    owners: dict[str, Path],
    known_groups: frozenset[str] | None,
) -> None:
    try:
        parsed = _parse(candidate.path)
        _require_known_groups(parsed.meta.audience, known_groups)
        document = _document(candidate, parsed)
    except NoBodyText as exc:
        report.notes.append((candidate.path, str(exc)))
        return
    except ExtractError as exc:
        report.failures.append(LoadFailure(candidate.path, str(exc)))
        return
    key = _duplicate_key(document)
    if key in bodies:
        report.duplicates.append((candidate.path, bodies[key]))
        return
    if document.doc_id in owners:
        owner = owners[document.doc_id]
        reason = f"document id {document.doc_id!r} is already used by {owner}; set `id` in its front matter"
        report.failures.append(LoadFailure(candidate.path, reason))
        return
    bodies[key], owners[document.doc_id] = document.doc_id, candidate.path
    report.documents.append(document)
    if parsed.note:
        report.notes.append((candidate.path, parsed.note))


def _parse(path: Path) -> _Parsed:
    data = _read(path)
    kind = _FORMATS[path.suffix.lower()]
    if kind in ("pdf", "docx"):
        extracted = pdf_to_markdown(data) if kind == "pdf" else docx_to_markdown(data)
        return _Parsed(normalise_markdown(extracted.markdown), _Meta(), extracted.title)
    text, note = _decode(data)
    meta, body = _front_matter(text)  # site generators give .html pages front matter too (audience!)
    if kind == "html":
        markdown, title = html_to_markdown(body)
        return _Parsed(normalise_markdown(markdown), meta, title, note)
    if kind == "markdown":
        body = convert_embedded_html(strip_templates(body))
    return _Parsed(normalise_markdown(body), meta, None, note)


def _read(path: Path) -> bytes:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ExtractError(f"file too large ({size // 2**20} MB; the limit is {MAX_FILE_BYTES // 2**20} MB)")
        return path.read_bytes()
    except OSError as exc:
        raise ExtractError(f"cannot read file: {exc.strerror or exc}") from exc


def _decode(data: bytes) -> tuple[str, str | None]:
    """Text with ``\n`` line ends, whatever the file used (Windows ``\r\n`` front matter is still front matter)."""
    text, note = _decode_bytes(data)
    return text.replace("\r\n", "\n").replace("\r", "\n"), note


def _decode_bytes(data: bytes) -> tuple[str, str | None]:
    """UTF-8 (a BOM is fine); else UTF-32 or UTF-16 with a BOM; else Windows-1252, with a note saying so."""
    if data.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):  # before UTF-16: its BOM starts the same
        return data.decode("utf-32"), "decoded as UTF-32"
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16"), "decoded as UTF-16"
    if b"\x00" in data:
        raise ExtractError("binary content in a text file")
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError:
        pass
    try:
        return data.decode("cp1252"), "not valid UTF-8; decoded as Windows-1252"
    except UnicodeDecodeError as exc:
        raise ExtractError(f"undecodable text: neither UTF-8 nor Windows-1252 (byte {exc.start})") from exc


def _front_matter(text: str) -> tuple[_Meta, str]:
    """Split YAML (``---``) or TOML (``+++``) front matter from the body, blank lines before it allowed.

    Front matter not recognised is read as body text and its ``audience`` ignored: a document meant
    for a few would be published to everyone. A broken block is the file's failure, not the run's.
    """
    start = _first_line_start(text)
    fence = text[start : start + 3]
    if fence not in _FRONT_MATTER or not re.match(rf"{re.escape(fence)}[ \t]*\n", text[start:]):
        return _Meta(), text
    match = _FRONT_MATTER[fence].match(text, start)
    if match is None:
        raise ExtractError(f"front matter opened with {fence} is never closed")
    try:
        data = tomllib.loads(match.group(1)) if fence == "+++" else _yaml_mapping(match.group(1))
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
        raise ExtractError(f"malformed front matter: {' '.join(str(exc).split())}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ExtractError("malformed front matter: expected key: value pairs")
    return _meta(data), text[match.end() :]


def _first_line_start(text: str) -> int:
    """Where the first line that is not blank starts."""
    blank = text[: len(text) - len(text.lstrip())]
    return blank.rfind("\n") + 1


def _yaml_mapping(text: str) -> object:
    """``yaml.safe_load``, refusing a top-level key set twice: PyYAML keeps the last one silently."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if isinstance(node, yaml.MappingNode):
            names = [key.value.strip().lower() for key, _ in node.value if isinstance(key, yaml.ScalarNode)]
            if repeated := next((name for name in names if names.count(name) > 1), None):
                raise ExtractError(f"front matter sets `{repeated}` twice")
        return loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()


def _meta(raw: dict[object, object]) -> _Meta:
    data = _keys_folded(raw)
    return _Meta(
        title=_text_field(data, "title"),
        url=_text_field(data, "url"),
        section=_text_field(data, "section"),
        audience=_audience(data),
        doc_id=_text_field(data, "id"),
        classification=_text_field(data, "classification"),
    )


def _keys_folded(data: dict[object, object]) -> dict[object, object]:
    """Keys in lower case, so ``Audience: hr`` restricts the document as ``audience: hr`` does.

    Read as an unknown key, a capitalised or misspelt audience would publish a restricted document to
    everyone: a key that looks like one but is not (``audiences``) fails the file instead, by name.
    """
    folded: dict[object, object] = {}
    for key, value in data.items():
        name = key.strip().lower() if isinstance(key, str) else key
        if name in folded:
            raise ExtractError(f"front matter sets `{name}` twice")
        if isinstance(name, str) and name != "audience" and _looks_like_audience(name):
            raise ExtractError(f"front matter key `{key}` is not `audience`: fix it, or the groups are not applied")
        folded[name] = value
    return folded


def _looks_like_audience(name: str) -> bool:
    """``audiences``, ``target_audience``, and misspellings (``audiance``, ``audeince``), not ``cadence``."""
    return "audien" in name or difflib.SequenceMatcher(None, name, "audience").ratio() >= 0.85


def _text_field(data: dict[object, object], key: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float | dt.date):
        raise ExtractError(f"front matter `{key}` must be text, not {type(value).__name__}")
    return str(value).strip() or None


def _audience(data: dict[object, object]) -> tuple[str, ...]:
    """A list or a comma-separated string of group names; no `audience` key: everyone may read it.

    A key that names no group (``audience: []``, ``audience: ""``, ``audience:``) fails the file: read as
    "no restriction" it would publish to everyone a document its author meant to restrict.
    """
    if "audience" not in data:
        return ()
    value = data["audience"]
    if isinstance(value, str):
        value = value.split(",")
    if value is not None and (
        not isinstance(value, list | tuple) or not all(isinstance(item, str | int) for item in value)
    ):
        raise ExtractError("front matter `audience` must be a list or a comma-separated string")
    groups = tuple(dict.fromkeys(str(item).strip() for item in value or () if str(item).strip()))
    if not groups:
        raise ExtractError(
            "front matter `audience` names no group: list the groups that may read the document "
            "(`all` for everyone), or remove the key"
        )
    return groups


def _require_known_groups(audience: tuple[str, ...], known_groups: frozenset[str] | None) -> None:
    """Each audience value is a configured group: a misspelt one (``hrr``) would hide the document from its group."""
    if known_groups is None:
        return
    unknown = [group for group in audience if group not in known_groups]
    if not unknown:
        return
    named = ", ".join(f"`{group}`" for group in unknown)
    what = "is not a known group" if len(unknown) == 1 else "are not known groups"
    raise ExtractError(
        f"front matter audience {named} {what} (known: {', '.join(sorted(known_groups))}): "
        "fix it, or nobody in that group can see the document"
    )


def _document(candidate: _Candidate, parsed: _Parsed) -> Document:
    _require_body(parsed.text)
    meta = parsed.meta
    title = meta.title or _first_h1(parsed.text) or parsed.title_hint or _pretty_stem(candidate.path)
    file = real_path(candidate.path)
    # The file's real path, not the path as typed: `index docs` and `index /abs/docs` are the same run.
    fields = [parsed.text, title, meta.url or file, meta.section, list(meta.audience)]
    if meta.classification:  # only then: the hashes of unclassified documents stay as they were (no re-embedding)
        fields.append(meta.classification)
    digest = hashlib.sha256(json.dumps(fields, ensure_ascii=False).encode()).hexdigest()
    return Document(
        meta.doc_id or candidate.doc_id, title, meta.url or str(candidate.path), parsed.text, digest,
        meta.section, meta.audience, file, meta.classification,
    )


def _require_body(text: str) -> None:
    if not text.strip():
        raise ExtractError("no text after conversion")
    if all(line.startswith("#") or not line.strip() for line in text.splitlines()):
        raise NoBodyText("skipped: only headings, no body text")


def _first_h1(text: str) -> str | None:
    match = _H1.search(_FENCED.sub("", text))  # a "# comment" in a code block is not a title
    return match.group(1).strip() if match else None


def _pretty_stem(path: Path) -> str:
    """``remote-work_policy.md`` -> "Remote work policy"; an index page takes its folder's name."""
    stem = path.stem
    if stem.lower() in ("index", "readme") and path.parent.name:
        stem = path.parent.name
    words = re.sub(r"[-_]+", " ", stem).strip()
    return words[:1].upper() + words[1:] if words else path.name


def _duplicate_key(document: Document) -> str:
    """The body without its title line, whitespace and case folded, plus who may see it and its label.

    Section, audience and classification are part of the key: the same text published for two
    audiences, or once marked confidential, is two documents; skipping one would change who can
    find it or drop the sensitivity label its citations show.
    """
    body = " ".join(re.sub(r"\A# .*\n*", "", document.text).split()).casefold()
    scope = [document.section, list(document.audience), (document.classification or "").casefold()]
    return hashlib.sha256(json.dumps([body, scope]).encode()).hexdigest()
