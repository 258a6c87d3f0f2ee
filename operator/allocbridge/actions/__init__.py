"""Allocation lifecycle actions as pod operations: stop, signal, restart, pause."""
