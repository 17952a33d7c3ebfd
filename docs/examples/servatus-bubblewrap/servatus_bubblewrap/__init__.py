"""servatus-bubblewrap: a site launcher plugin; see plugin.py."""
