"""Policy files in, Documents out: Markdown, text, HTML, PDF and DOCX, each body normalised to Markdown.

One bad file never stops a load (it becomes a LoadFailure). Importing this package imports the PDF,
DOCX and HTML parsers, so retrieval imports it only when a run loads files.
"""

from __future__ import annotations

from retrieval.ingest.loaders import load_documents

__all__ = ["load_documents"]
