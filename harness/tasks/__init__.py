"""The task suite: one module per task, each registered under its name."""

from harness.tasks import copy, reverse  # noqa: F401  (registers the tasks)
from harness.tasks.base import TASKS, Example, Task, available, create, register_task

__all__ = ["TASKS", "Example", "Task", "available", "create", "register_task"]
