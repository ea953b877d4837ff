"""One ``llm-bot`` command: the development tools' commands where llm-bot-tools is installed,
and where it is not, one line that says how to install it (exit 2), while the service's commands
work."""

from __future__ import annotations

import argparse
import sys

import pytest

from llm_bot.cli import main
from llm_bot.cli.dev_tools import DEV_TOOL_COMMANDS
from llm_bot.cli.parser import build_parser


def command_names(parser: argparse.ArgumentParser) -> list[str]:
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(commands.choices)


class NoDevTools:
    """A finder, first on ``sys.meta_path``, for which llm_bot_tools does not exist."""

    def find_spec(self, name: str, path: object, target: object = None) -> None:
        if name == "llm_bot_tools":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


@pytest.fixture
def without_dev_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    """The import system as in the image: no llm_bot_tools to be found."""
    for name in [n for n in sys.modules if n.split(".")[0] == "llm_bot_tools"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [NoDevTools(), *sys.meta_path])


def test_the_dev_tools_add_exactly_the_commands_the_service_stands_in_for() -> None:
    names = command_names(build_parser())
    assert [n for n in names if n in DEV_TOOL_COMMANDS] == list(DEV_TOOL_COMMANDS)
    assert {"schema", "migrate", "memories", "run", "check"} <= set(names)


@pytest.mark.usefixtures("without_dev_tools")
@pytest.mark.parametrize(
    "argv",
    [
        ["bench"],
        ["bench", "run", "--json", "--events", "3"],
        ["send", "hello", "--user", "u-1", "--thread", "room", "--local"],
        ["send", "-h"],
        ["eval", "retrieval"],
        ["dev", "--services-only"],
    ],
)
def test_without_the_dev_tools_a_dev_tool_command_says_how_to_install_them(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    output = capsys.readouterr()
    assert output.out == ""
    [line] = output.err.strip().splitlines()
    assert line.startswith(f"llm-bot: {argv[0]}: the development tools (llm-bot-tools) are not")
    assert "pip install -e ./tools" in line


@pytest.mark.usefixtures("without_dev_tools")
def test_without_the_dev_tools_the_service_commands_work_and_help_lists_every_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["schema", "--model", "CandidateV1"]) == 0
    assert '"CandidateV1"' in capsys.readouterr().out
    names = command_names(build_parser())
    assert set(DEV_TOOL_COMMANDS) <= set(names)


def test_a_dev_tools_package_that_fails_to_import_is_named_in_the_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Installed but broken (a dependency of the development tools missing): the line says why,
    and the service's commands still work."""
    monkeypatch.setitem(sys.modules, "llm_bot_tools.cli", None)
    assert main(["bench"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "(llm-bot-tools) do not import (import of llm_bot_tools.cli halted" in line
    assert "pip install -e ./tools" in line
    assert main(["schema"]) == 0
