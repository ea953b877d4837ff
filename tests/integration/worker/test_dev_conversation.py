"""`llm-bot dev` (what `make run` runs) starts the worker and shows a conversation through it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from llm_bot_tools.devstack.stack import DEMO_CONVERSATION
from llm_bot_tools.local.pubsub_emulator import free_loopback_port

pytestmark = pytest.mark.integration


def test_dev_runs_the_worker_shows_the_conversation_and_stops_cleanly(tmp_path: Path) -> None:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PUBSUB_", "DATABASE_"))
    }
    env["PORT"] = str(free_loopback_port())
    process = subprocess.Popen(
        [sys.executable, "-m", "llm_bot.cli", "dev", "--data-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        start_new_session=True,  # its group: what outlives a failed stop is killed with it
    )
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if "local stack ready" in line:
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert ready.wait(180), "\n".join(lines)
        assert process.poll() is None, "\n".join(lines)
        for user, thread, text in DEMO_CONVERSATION:
            assert f"# {user}@{thread}> {text}" in lines
            assert f"# llm-bot> echo: {text}" in lines
        # The demo ends by explaining Ada's last answer: her fact, saved in the lobby, reached
        # the model in the harbour, shown with its scores and the words read from its row.
        why = lines.index(next(line for line in lines if line.startswith("# why llm-bot")))
        explanation = lines[why + 1 : lines.index("#   == Left out ==")]
        memory = [line for line in explanation if line.startswith("#   [Memory ")]
        assert len(memory) == 1, "\n".join(lines)
        assert "(version 1)" in memory[0]
        assert "similarity" in memory[0]
        assert explanation[explanation.index(memory[0]) + 1] == '#       "Ada loves sailing"'
        assert "#   [Input] from the event's message; the user's words" in explanation
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        # After a failed assertion, stop it as a user would, so it stops what it started (the
        # emulator, Postgres, the model server); a kill would leave them running.
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
