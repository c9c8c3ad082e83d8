"""emu: a packet-level emulator of GPU-cluster fabrics."""
