"""servatus_apptainer: see plugin.py."""
