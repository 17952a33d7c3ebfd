"""Shared test configuration: loads the real-cluster fixture (``slurm_cluster``)."""

pytest_plugins = ["cluster.fixture"]

# tests/smoke runs only against the installed wheels (`tox -e wheels`), never the source tree.
collect_ignore = ["smoke"]
