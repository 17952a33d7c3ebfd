"""The engine: pure decisions over frozen values, no I/O. The plan (:mod:`.plan`), the status
projection (:mod:`.status`), the report's data (:mod:`.report`) and settlement
(:mod:`.settlement`); what commands do with them over a transport is :mod:`servatus.operations`."""
