"""Frames emu puts on the wire: Scapy layers, templates and fast codecs."""
