"""Notebook 13's graded questions (``13.Qk``)."""

from __future__ import annotations

QUESTIONS: list = []
