"""One event's unit of work: the graph run, its outcome and the turn it leaves to memory."""

from llm_bot.answer.unit import Answer, Answerer, DeadlineExceeded, InternalFailure, Writes

__all__ = ["Answer", "Answerer", "DeadlineExceeded", "InternalFailure", "Writes"]
