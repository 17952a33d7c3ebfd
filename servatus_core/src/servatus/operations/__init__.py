"""What commands do, one concept a module: authoring the roster (:mod:`.authoring`), saved plans
(:mod:`.saved_plan`), observing Slurm and recording what settled (:mod:`.observation`),
planning (:mod:`.planning`), submitting a reviewed plan (:mod:`.submit`) with an intent before
every ``sbatch`` (:mod:`.submission`), validating shapes (:mod:`.validate`), reconciling from
evidence (:mod:`.reconcile`), cancelling (:mod:`.cancel`), reading logs (:mod:`.logs`) and the
read-only cluster checks (:mod:`.doctor`). Each takes what it reaches beyond the journal as one
:class:`.context.Context`, decides through :mod:`servatus.engine` and records through
:mod:`servatus.journal`; :class:`servatus.campaign.Campaign` is their public face, and
:class:`.held.HeldState` the status cache's."""
