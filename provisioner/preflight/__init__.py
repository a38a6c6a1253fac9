"""`provision preflight`: know before the hours that a host will hold a training job.

The package reads the chips (npu-smi), the NPU network (hccn.conf, hccn_tool), the clock (chronyc) and a
measured collective sweep (the `provision.collective/1` document of provisioner.launch.collective) and judges
each against sourced data in matrices/preflight.yaml. parse.py reads the tools' text, facts.py gathers it
from the live host or another host's tree and saved output, checks.py (chips) and network.py (NPU network,
clock) judge it, bandwidth.py judges the sweep, report.py runs everything and prints it. Every check has a
status: pass, fail, warn or n/a (with why); nothing unmeasured passes.
"""
