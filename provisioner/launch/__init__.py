"""Running a DevicePlan: the container, torchrun inside it, log streaming, signals, exit codes, the collective check."""
