"""The campaign journal: its records and state (:mod:`.records`), the fold (:mod:`.folding`),
its bytes (:mod:`.codec`) and its files, lock, writer and compaction (:mod:`.store`).

Importing this package loads none of them: a pure module takes the values from
:mod:`servatus.journal.records` without the journal's I/O."""
