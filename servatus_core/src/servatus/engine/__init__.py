"""The engine: pure decisions over frozen values, no I/O.

The plan: its values and the decision (:mod:`.plan`), packing (:mod:`.packing`), making one
(:mod:`.planning`), what must hold in it (:mod:`.plan_checks`) and its ``plan/5`` document
(:mod:`.plan_document`). Status: the projection (:mod:`.status`), its values
(:mod:`.status_values`), the slot rules (:mod:`.slots`), chains cut short (:mod:`.chain_cuts`),
what it reads (:mod:`.status_inputs`) and its ``status/4`` document (:mod:`.status_document`).
The report's data (:mod:`.report`) and settlement (:mod:`.settlement`). What commands do with
them over a transport is :mod:`servatus.operations`."""
