"""What a tool message tells the model, as tests read it back from the model server's requests:
a platform tool's output comes labelled and fenced (``llm_bot.llm.messages.sent_content``)."""

from __future__ import annotations

LABEL = "Output of the tool "


def shown(content: str) -> str:
    """The tool's own text of a tool message: inside the fence for a platform tool's output,
    the whole content for any other (a memory tool's, an unknown tool's)."""
    label, _, rest = content.partition("\n")
    if not label.startswith(LABEL):
        return content
    opening, _, body = rest.partition("\n")
    fence = opening.removesuffix("text")
    if not body.endswith("\n" + fence):
        raise AssertionError(f"an unclosed fence in {content!r}")
    return body[: -len(fence) - 1]
