"""Counted nouns as people write them: "1 job", "2 jobs" (one spelling for every message)."""

from __future__ import annotations

__all__ = ["plural"]


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``"{count} {noun}"``, the noun made plural unless ``count`` is 1 (``many``: an
    irregular plural)."""
    return f"{count} {noun if count == 1 else (many or noun + 's')}"
