"""Write docs/lifecycle-event.schema.json: the JSON Schema of a lifecycle event's data, from
the model the functions send (functions.jobs.core.lifecycle.LifecycleData).

    python -m hack.lifecycle_schema
"""

from __future__ import annotations

import json
from pathlib import Path

from functions.jobs.core.lifecycle import data_schema

TARGET = Path(__file__).resolve().parents[1] / "docs" / "lifecycle-event.schema.json"


def render() -> str:
    return json.dumps(data_schema(), indent=2) + "\n"


if __name__ == "__main__":
    TARGET.write_text(render())
