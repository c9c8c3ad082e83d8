"""The emu switch: one process per switch that forwards real frames by an OpenFlow 1.3 pipeline."""
