# provision run-cmd: 800T-A3 (Atlas 800T A3 training server, chip family a3), host chips 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15, devices mode
# host davinci0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15 -> container NPU 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15 (ASCEND_RT_VISIBLE_DEVICES, if you set it, takes these container-local ids)
# no --privileged: the device nodes listed here are all the container needs
# --group-add 1000: the device nodes belong to group 1000 (HwHiAiUser) with mode 0660; a non-root user in the image opens them through this group
# --shm-size 64g: a private /dev/shm of that size (raise it if workers die with bus errors)
# driver 25.2.0: /usr/local/Ascend/driver/lib64 + version.info read-only; driver/lib64 + version.info is what the official CANN image, Ascend/pytorch and vllm-ascend map; it gives torch_npu the driver libraries and the version file without exposing the rest of the driver tree
# --network host: node 0 of 4; HCCL and torchrun reach the other nodes directly (master 10.0.1.1:29500)
docker run --rm \
  --device /dev/davinci0 \
  --device /dev/davinci1 \
  --device /dev/davinci2 \
  --device /dev/davinci3 \
  --device /dev/davinci4 \
  --device /dev/davinci5 \
  --device /dev/davinci6 \
  --device /dev/davinci7 \
  --device /dev/davinci8 \
  --device /dev/davinci9 \
  --device /dev/davinci10 \
  --device /dev/davinci11 \
  --device /dev/davinci12 \
  --device /dev/davinci13 \
  --device /dev/davinci14 \
  --device /dev/davinci15 \
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
  -v /usr/bin/hccn_tool:/usr/bin/hccn_tool:ro \
  -v /etc/hccn.conf:/etc/hccn.conf:ro \
  --group-add 1000 \
  --shm-size 64g \
  --network host \
  -e HCCL_CONNECT_TIMEOUT=3600 \
  -e HCCL_EXEC_TIMEOUT=3600 \
  -e HCCL_SOCKET_IFNAME==eth0 \
  -e GLOO_SOCKET_IFNAME=eth0 \
  -e MASTER_ADDR=10.0.1.1 \
  -e MASTER_PORT=29500 \
  -e NNODES=4 \
  -e NODE_RANK=0 \
  -e NPROC_PER_NODE=16 \
  provision/train:a3-x16 provision-train --config /workspace/train.yaml
