"""provision: version-consistent Ascend NPU software stacks.

The host-side package imports nothing heavy at start; docker, jinja2 and torch
are imported inside the functions that need them.
"""
