"""servatus_slurm: see plugin.py."""
