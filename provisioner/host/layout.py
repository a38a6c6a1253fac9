"""Where the Ascend software lives on a host, as paths relative to the host root.

Plain constants with no imports, so the quickest readers (the no-driver check of
`provision resolve`, see provisioner/host/buildfacts.py) can use them without
loading pathlib; provisioner/host/hostfs.py re-exports them for everyone else.
"""

DRIVER_DIRS = ("usr/local/Ascend/driver", "usr/local/npu/driver")
NPU_SMI_DIRS = ("usr/local/bin", "usr/local/sbin", "usr/bin", "usr/sbin")
BOOT_ID = "proc/sys/kernel/random/boot_id"
KERNEL_ARCH = "proc/sys/kernel/arch"
