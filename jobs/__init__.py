"""Thin `ray job submit` entrypoints (installed as elastune.jobs)."""
