# provision run-cmd: 350 (Atlas 350 card (Ascend 950), chip family 950), host chips 0, devices mode
# host davinci0 -> container NPU 0 (ASCEND_RT_VISIBLE_DEVICES, if you set it, takes these container-local ids)
# no --privileged: the device nodes listed here are all the container needs
# --group-add 1000: the device nodes belong to group 1000 (HwHiAiUser) with mode 0660; a non-root user in the image opens them through this group
# --ipc=host: DataLoader workers and HCCL share memory through /dev/shm; host IPC lifts Docker's 64 MB default but shares the host's IPC namespace (--shm-size SIZE gives a private, sized one)
# driver 25.5.0: /usr/local/Ascend/driver (whole) read-only; 950 needs driver/topo next to the libraries: with only driver/lib64 HCCL init fails with EI0014 (atlas_350_3.json missing), so the whole /usr/local/Ascend/driver is mapped
docker run --rm \
  --device /dev/davinci0 \
  --device /dev/davinci_manager \
  --device /dev/hisi_hdc \
  --device /dev/uburma/uburma0 \
  --device /dev/ummu/ummu0 \
  -v /usr/local/Ascend/driver:/usr/local/Ascend/driver:ro \
  -v /etc/ascend_install.info:/etc/ascend_install.info:ro \
  -v /usr/local/dcmi:/usr/local/dcmi:ro \
  -v /usr/local/bin/npu-smi:/usr/local/bin/npu-smi:ro \
  -v /usr/lib64/libummu.so:/usr/lib64/libummu.so:ro \
  -v /usr/lib64/liburma.so:/usr/lib64/liburma.so:ro \
  -v /usr/lib64/urma:/usr/lib64/urma:ro \
  --group-add 1000 \
  --ipc=host \
  provision/train:950-x1 provision-train --config /workspace/train.yaml
