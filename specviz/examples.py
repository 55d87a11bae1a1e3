"""Built-in prompts: examples for the app and a default prompt set for benchmarks and tests."""

import json
from pathlib import Path

EXAMPLE_PROMPTS: list[str] = json.loads((Path(__file__).parent / "data" / "prompts.json").read_text())
