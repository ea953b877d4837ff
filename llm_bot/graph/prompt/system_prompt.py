"""Where the system prompt comes from: ``LLM_BOT_SYSTEM_PROMPT``, else ``architecture.yaml``.

``architecture.yaml`` is looked for in the working directory, then beside the package (a
source checkout or an image that copies it next to ``llm_bot/``). No prompt anywhere is
allowed: the model then gets none.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from llm_bot.settings import Settings

ARCHITECTURE_FILE = "architecture.yaml"


def architecture_file() -> Path | None:
    for folder in (Path.cwd(), Path(__file__).resolve().parents[3]):
        candidate = folder / ARCHITECTURE_FILE
        if candidate.is_file():
            return candidate
    return None


def resolve_system_prompt(settings: Settings, architecture: Path | None = None) -> str | None:
    if settings.system_prompt:
        return settings.system_prompt
    path = architecture or architecture_file()
    if path is None:
        return None
    document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    prompt = (document.get("llm_bot") or {}).get("system_prompt")
    return prompt.strip() if isinstance(prompt, str) and prompt.strip() else None
