"""The package version: the one place it is written. build_wheel.py reads it
for the wheel's metadata, and the damacy binary embeds this file and reports
the same release (``damacy version``, and the ``server`` of
``Pipeline.server_info``)."""

__version__ = "0.1.0"
