"""Transcripts agents already write, read into sessions: Claude Code's and Codex's."""
