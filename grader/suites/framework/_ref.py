"""Parent-side references of the framework suite (being written)."""

from __future__ import annotations
