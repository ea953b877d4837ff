"""An explanation as text for a terminal (``llm-bot explain``, ``llm-bot dev``'s demo): the
rendering of the view (:mod:`llm_bot.explanation.view`) for a reader of lines rather than JSON,
kept apart from the reads so the text's shape changes in one place.
"""

from __future__ import annotations

import json

from llm_bot.explanation.view import Explanation
from llm_bot.text import printable


def render_text(explanation: Explanation) -> str:
    """The explanation for a terminal: the decision, the prompt part by part, labelled with
    where each part came from and why, what was left out, the answer and the tool calls. Text
    that is not ours is quoted as JSON strings, one line each; the ids of an event and of the
    rows it cites (in the labels) are shown as they are, their unprintable characters escaped
    (:func:`llm_bot.text.printable`)."""
    lines = [
        f"Explanation of {explanation.correlation_id} (user {json.dumps(explanation.user_id)},"
        f" thread {json.dumps(explanation.thread_id)}, {explanation.at.isoformat()})",
    ]
    decision = explanation.decision
    if decision is not None:
        lines.append(
            "Behaviour: intent {intent}, tone {tone}, risk {risk}, mode {mode}, gate {gate}".format(
                intent=decision.get("intent"),
                tone=decision.get("tone"),
                risk="/".join(str(each) for each in decision.get("risk", [])),
                mode=decision.get("mode"),
                gate=decision.get("gate"),
            )
            + (f"; rules: {', '.join(decision.get('rules', []))}" if decision.get("rules") else "")
        )
    titles = {"system": "System message", "memory": "Memory context", "user": "User message"}
    current: str | None = None
    for part in explanation.parts:
        if part.message != current:
            current = part.message
            lines += ["", f"== {titles[part.message]} =="]
        lines.append(f"[{part.label}] from {part.origin}; {part.why}")
        if part.state == "shown" and part.text is not None:
            lines.append(f"    {json.dumps(part.text, ensure_ascii=False)}")
        elif part.state is not None and part.state != "shown":
            lines.append(f"    ({part.state})")
    lines += ["", "== Left out =="]
    counts = {
        **explanation.left_out,
        **({"retrieval_failed": explanation.failed} if explanation.failed else {}),
    }
    lines += [f"{reason}: {count}" for reason, count in sorted(counts.items())] or ["nothing"]
    lines += ["", "== Answer =="]
    answer = explanation.answer
    lines.append(json.dumps(answer, ensure_ascii=False) if answer is not None else "(erased)")
    lines += ["", "== Tool calls =="]
    lines += [
        f"{tool.tool}: {tool.status}" + (f" (ledger {tool.ledger_key})" if tool.ledger_key else "")
        for tool in explanation.tools
    ] or ["none"]
    return "\n".join(printable(line) for line in lines)
