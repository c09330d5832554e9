"""Installed plugin versions (the store); activation itself is a supervisor transition."""
