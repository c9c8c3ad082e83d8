"""The host agent and RDMA NIC model: RoCEv2 transport, DCQCN, PFC, verbs-like API."""
