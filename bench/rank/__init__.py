"""The rank side: what runs under torchrun, one process per GPU (torch imported here)."""
