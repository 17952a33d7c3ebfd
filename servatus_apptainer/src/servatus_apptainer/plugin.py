"""Registered through the servatus entry-point group; hook implementations land here."""
