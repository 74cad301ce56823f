"""Files people attach to a question: PolicyPal does not read them, and says so rather than ignore them.

One sentence for every surface (Slack file shares, Teams attachments); the adapter names the files.
"""

from __future__ import annotations

from collections.abc import Sequence

NAMES_SHOWN = 3
NAME_CHARS = 80


def files_not_read(names: Sequence[str], *, question: bool) -> str:
    """What the person is told about the files they attached; ``question``: their message asks something too."""
    shown = [name.strip()[:NAME_CHARS] or "a file" for name in names[:NAMES_SHOWN]]
    more = len(names) - len(shown)
    listed = ", ".join(shown) + (f" and {more} more" if more > 0 else "")
    what = "the file" if len(names) == 1 else "the files"
    if question:
        return f"I can't read attached files, so I haven't opened {what} ({listed}): I answer your message only."
    return f"I can't read attached files ({listed}). Type your question in a message and I'll answer from the policies."
