# provision run-cmd: 800T-A2 (Atlas 800T A2 training server, chip family 910b), host chips 4,5, runtime mode
# host davinci4,5 -> container NPU 0,1 (ASCEND_RT_VISIBLE_DEVICES, if you set it, takes these container-local ids)
# --runtime ascend: the Ascend runtime maps the chips named in ASCEND_VISIBLE_DEVICES (physical ids), the shared nodes and the driver files of its lists
# --group-add 1001: the device nodes belong to group 1001 (HwHiAiUser) with mode 0660; a non-root user in the image opens them through this group
# --ipc=host: DataLoader workers and HCCL share memory through /dev/shm; host IPC lifts Docker's 64 MB default but shares the host's IPC namespace (--shm-size SIZE gives a private, sized one)
# driver 24.1.rc3: /usr/local/Ascend/driver/lib64 + version.info read-only; the Ascend runtime mounts driver/lib64, include and topo itself; only what it leaves out is added
docker run --rm \
  --runtime ascend \
  -e ASCEND_VISIBLE_DEVICES=4,5 \
  -v /usr/local/Ascend/driver/version.info:/usr/local/Ascend/driver/version.info:ro \
  -v /etc/ascend_install.info:/etc/ascend_install.info:ro \
  -v /usr/local/sbin/npu-smi:/usr/local/bin/npu-smi:ro \
  --group-add 1001 \
  --ipc=host \
  -e HCCL_CONNECT_TIMEOUT=3600 \
  -e HCCL_EXEC_TIMEOUT=3600 \
  -e NPROC_PER_NODE=2 \
  provision/train:800ta2-x2 provision-train --config /workspace/train.yaml
