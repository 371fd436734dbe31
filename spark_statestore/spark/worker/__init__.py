"""What runs in a Python worker on an executor: the worker's runtime kept across tasks
and the per-task partition state every operator adapter drives."""
