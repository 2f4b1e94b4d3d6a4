"""Where the history lives unless `--db` says otherwise: the user's data directory (XDG_DATA_HOME on Linux)."""

from __future__ import annotations

from pathlib import Path

HISTORY_FILE = "history.sqlite"


def default_history_path() -> Path:
    import platformdirs  # noqa: PLC0415 - only a recording command needs it

    return platformdirs.user_data_path("capcon") / HISTORY_FILE
