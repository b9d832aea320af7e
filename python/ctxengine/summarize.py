"""Summarizers used by compaction; they live in :mod:`ctxengine.compaction` (this module keeps
the earlier import path working)."""

from __future__ import annotations

from .compaction import ExtractiveSummarizer, LLMSummarizer, Summarizer

__all__ = ("ExtractiveSummarizer", "LLMSummarizer", "Summarizer")
