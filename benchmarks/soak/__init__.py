"""The chaos soak of issue #34, in parts: a seeded fault plan (:mod:`soak.schedule`), the
driver's command log (:mod:`soak.commandlog`) and its loop of user commands (:mod:`soak.drive`),
the evidence read at the end (:mod:`soak.evidence`), the invariants checked over it
(:mod:`soak.invariants`), and the report (:mod:`soak.report`). The injector that turns the fault
plan into actions on the test cluster is not here yet (see benchmarks/README.md).

Import it with ``benchmarks/`` on ``sys.path`` (``python benchmarks/soak`` does that itself).
"""
