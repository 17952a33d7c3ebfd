"""Atomic publication for Servatus workers: ``publish``, ``publish_file`` and ``Workspace``.

The public names are re-exported by ``servatus``; the built-in lock and no-replace commit are
plugin hooks implemented in :mod:`servatus_publish.plugin`.
"""
