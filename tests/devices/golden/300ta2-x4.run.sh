# provision run-cmd: 300T-A2 (Atlas 300T A2 training card, chip family 910b), host chips 0,1,2,3, devices mode
# host davinci0,1,2,3 -> container NPU 0,1,2,3 (ASCEND_RT_VISIBLE_DEVICES, if you set it, takes these container-local ids)
# no --privileged: the device nodes listed here are all the container needs
# --group-add 1000: the device nodes belong to group 1000 (HwHiAiUser) with mode 0660; a non-root user in the image opens them through this group
# --ipc=host: DataLoader workers and HCCL share memory through /dev/shm; host IPC lifts Docker's 64 MB default but shares the host's IPC namespace (--shm-size SIZE gives a private, sized one)
# driver 24.1.0: /usr/local/Ascend/driver/lib64 + version.info read-only; driver/lib64 + version.info is what the official CANN image, Ascend/pytorch and vllm-ascend map; it gives torch_npu the driver libraries and the version file without exposing the rest of the driver tree
docker run --rm \
  --device /dev/davinci0 \
  --device /dev/davinci1 \
  --device /dev/davinci2 \
  --device /dev/davinci3 \
  --device /dev/davinci_manager \
  --device /dev/devmm_svm \
  --device /dev/hisi_hdc \
  -v /usr/local/Ascend/driver/lib64:/usr/local/Ascend/driver/lib64:ro \
  -v /usr/local/Ascend/driver/include:/usr/local/Ascend/driver/include:ro \
  -v /usr/local/Ascend/driver/version.info:/usr/local/Ascend/driver/version.info:ro \
  -v /etc/ascend_install.info:/etc/ascend_install.info:ro \
  -v /usr/local/dcmi:/usr/local/dcmi:ro \
  -v /usr/local/bin/npu-smi:/usr/local/bin/npu-smi:ro \
  --group-add 1000 \
  --ipc=host \
  -e HCCL_CONNECT_TIMEOUT=3600 \
  -e HCCL_EXEC_TIMEOUT=3600 \
  -e NPROC_PER_NODE=4 \
  provision/train:300ta2-x4 provision-train --config /workspace/train.yaml
