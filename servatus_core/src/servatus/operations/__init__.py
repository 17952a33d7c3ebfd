"""What commands do: authoring the roster (:mod:`.authoring`), saved plans (:mod:`.saved_plan`),
submission with an intent before every ``sbatch`` (:mod:`.submission`), reconciliation from
evidence (:mod:`.reconcile`), cancelling (:mod:`.cancel`) and the read-only cluster checks
(:mod:`.doctor`). Each decides through :mod:`servatus.engine` and records through
:mod:`servatus.journal`; :class:`servatus.campaign.Campaign` is their public face."""
