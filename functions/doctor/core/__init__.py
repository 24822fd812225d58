"""The doctor's checks as pure functions of what was read (no I/O here)."""
