"""servatus_publish: see plugin.py."""
