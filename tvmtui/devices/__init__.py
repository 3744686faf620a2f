"""Devices: targets, chip identity and (later) RPC boards."""
