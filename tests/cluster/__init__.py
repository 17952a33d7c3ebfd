"""The project's own real local Slurm cluster: harness, pytest fixture, and its tests."""
