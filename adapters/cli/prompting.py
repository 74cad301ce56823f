"""Reading a line at the terminal inside asyncio.run(), where Ctrl-C must end the read at once."""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

INTERRUPTED = 130  # the exit code of a command ended by Ctrl-C (128 + SIGINT)
POLL_S = 0.1  # the longest a Ctrl-C can wait, in the instant before a read begins


@contextmanager
def interruptible() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt inside a blocking read, as it does in a plain script.

    asyncio.run() swaps Python's SIGINT handler for one that only cancels the main task. A blocking
    input() never yields to the event loop, so that cancel waited for Enter and then landed at the
    next await, whatever it was (the decision on a pending action, say).
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread; a read elsewhere keeps its defaults
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)


def read_line(read: Callable[[str], str], prompt: str) -> str:
    """One line from ``read`` (input() or a test's callable); Ctrl-C raises KeyboardInterrupt at once."""
    with interruptible():
        if read is not input or not _is_terminal(sys.stdin):
            return read(prompt)
        sys.stdout.write(prompt)
        sys.stdout.flush()
        _wait_for_a_line(sys.stdin)
        return input()


def _wait_for_a_line(terminal: TextIO) -> None:
    """Return once the terminal has a line (or Ctrl-D) to read, waiting POLL_S at a time.

    A Ctrl-C that lands after the prompt is shown but before a blocking read has begun interrupts
    nothing: the read would then wait for Enter. Between short waits Python runs the handler.
    """
    while not select.select([terminal], [], [], POLL_S)[0]:
        pass


def _is_terminal(stream: TextIO) -> bool:
    """Only a real terminal: a pipe's next lines may already sit in Python's buffer, where select cannot
    see them, and a stand-in object that says it is a terminal has no descriptor to wait on."""
    try:
        return os.isatty(stream.fileno())
    except (AttributeError, OSError, ValueError):  # no file behind it (io.UnsupportedOperation), or closed
        return False
