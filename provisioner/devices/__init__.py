"""HostReport + chip selection -> DevicePlan, and its renderers: docker run line / docker-py kwargs, CDI, Kubernetes, HCCL rank table."""
