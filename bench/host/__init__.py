"""The host side: the matrix, launchers, doctor and settings; runs on any head node, no torch."""
