"""What commands do over a transport: submission with an intent before every ``sbatch``
(:mod:`.submission`), reconciliation from evidence (:mod:`.reconcile`), cancelling
(:mod:`.cancel`) and the read-only cluster checks (:mod:`.doctor`). Each decides through
:mod:`servatus.engine` and records through :mod:`servatus.journal`."""
