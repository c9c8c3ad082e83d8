"""The live view: a web page of a running fabric, served from the process that runs it.

Owns showing a fabric while it runs: the graph drawn by tiers, each link
coloured by its utilisation, each switch port's queue depth, PAUSE received
and sent per priority, ECN marks and drops, updated four times a second; and
the run's report and plots when it ends. `model` turns samples into the
page's JSON (pure), `sampler` asks the switches (one thread), `server` serves
the page, its vendored JS/CSS (`static/`) and the JSON (standard library).
Does not own the switches' counters (emu/switch/reports.py, `live`) nor the
run's results (emu/scenario.py, emu/telemetry.py).

    with Fabric(graph) as fab, emu.live.serve(fab, port=8765) as view:
        print("open", view.url)
"""

from emu.live.server import DEFAULT_PORT, LiveServer, LiveViewError, serve

__all__ = ["DEFAULT_PORT", "LiveServer", "LiveViewError", "serve"]
