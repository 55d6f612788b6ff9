"""The web UI (installed as elastune.ui)."""
