"""The chaos soak of issue #34, in parts: a seeded fault plan (:mod:`soak.schedule`), the
driver's command log (:mod:`soak.commandlog`) and its loop of user commands (:mod:`soak.drive`),
the evidence read at the end (:mod:`soak.evidence`), the invariants checked over it
(:mod:`soak.invariants`), and the report (:mod:`soak.report`); the injector that does a fault
plan's events (:mod:`soak.inject`), the soak Task's program (``task.py``, copied to the
cluster), and one whole soak on the test cluster (:mod:`soak.oncluster`).

Import it with ``benchmarks/`` on ``sys.path`` (``python benchmarks/soak`` does that itself).
"""
