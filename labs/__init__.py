"""emu's teaching labs, one package per lab; emu/labs.py says what each must hold."""
