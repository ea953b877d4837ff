"""The worker process: wiring from settings, lifecycle, health endpoint."""

from llm_bot.worker.service import Worker, WorkerError, install_signal_handlers, run_worker

__all__ = ["Worker", "WorkerError", "install_signal_handlers", "run_worker"]
