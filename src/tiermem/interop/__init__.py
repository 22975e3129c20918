"""Bringing memory in and out: Letta Agent Files, full backups, other memory servers' formats, host snippets."""
