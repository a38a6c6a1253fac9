# provision run-cmd: 300I-Pro (Atlas 300I Pro inference card, chip family 310p), host chips 0, devices mode
# host davinci0 -> container NPU 0 (ASCEND_RT_VISIBLE_DEVICES, if you set it, takes these container-local ids)
# no --privileged: the device nodes listed here are all the container needs
# --group-add 1000: the device nodes belong to group 1000 (HwHiAiUser) with mode 0660; a non-root user in the image opens them through this group
# --ipc=host: DataLoader workers and HCCL share memory through /dev/shm; host IPC lifts Docker's 64 MB default but shares the host's IPC namespace (--shm-size SIZE gives a private, sized one)
# driver 24.1.rc2: /usr/local/Ascend/driver/lib64 + version.info read-only; driver/lib64 + version.info is what the runtime's base.list and the official images map for 310P cards
docker run --rm \
  --device /dev/davinci0 \
  --device /dev/davinci_manager \
  --device /dev/devmm_svm \
  --device /dev/hisi_hdc \
  --device /dev/dvpp_cmdlist \
  -v /usr/local/Ascend/driver/lib64:/usr/local/Ascend/driver/lib64:ro \
  -v /usr/local/Ascend/driver/include:/usr/local/Ascend/driver/include:ro \
  -v /usr/local/Ascend/driver/version.info:/usr/local/Ascend/driver/version.info:ro \
  -v /etc/ascend_install.info:/etc/ascend_install.info:ro \
  -v /usr/local/dcmi:/usr/local/dcmi:ro \
  -v /usr/local/bin/npu-smi:/usr/local/bin/npu-smi:ro \
  --group-add 1000 \
  --ipc=host \
  provision/train:300ipro-x1 provision-train --config /workspace/train.yaml
