"""Freed start-up memory goes back to the operating system where the C library can do it."""

from __future__ import annotations

import platform

import pytest

from bot.runtime import release_freed_memory


def test_freed_memory_is_released_on_glibc_and_skipped_quietly_elsewhere() -> None:
    libc, _version = platform.libc_ver()
    if libc != "glibc":
        assert release_freed_memory() is False
        pytest.skip(f"malloc_trim is glibc's; this C library is {libc or 'unknown'}")
    assert release_freed_memory() is True
    assert release_freed_memory() is True  # safe to call again: nothing is left to release
