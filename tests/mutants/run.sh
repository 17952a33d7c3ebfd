#!/bin/sh
# Mutation testing of the pure engine modules (tox -e mutants): for each module configured
# beside this script, plant every mutant, run the module's fast tests against it, and print
# the survivors and the score. $1: a directory for the session files. Run from the repository's
# root, with nothing else running from this tree: cosmic-ray edits each module in place and puts
# it back (if interrupted, `git checkout` the module). PYTHONDONTWRITEBYTECODE keeps a mutant's
# bytecode from outliving it.
set -eu
sessions=${1:?usage: tests/mutants/run.sh SESSION_DIRECTORY}
mkdir -p "$sessions"
export PYTHONDONTWRITEBYTECODE=1
for config in tests/mutants/*.toml; do
    name=${config##*/}
    session="$sessions/${name%.toml}.sqlite"
    began=$(date +%s)
    cosmic-ray init "$config" "$session" --force
    cr-filter-operators "$session" "$config"
    cosmic-ray exec "$config" "$session"
    echo "== ${name%.toml}: $(($(date +%s) - began)) s"
    cr-report --surviving-only "$session"
done
