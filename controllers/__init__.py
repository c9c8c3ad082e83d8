"""os-ken (Ryu) applications that drive any OpenFlow 1.3 switch; they never import emu.switch or emu.net."""
