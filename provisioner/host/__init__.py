"""Reading a host (probe, host files, npu-smi), judging it (audit findings), and checking inside a container (doctor)."""
