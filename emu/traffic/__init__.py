"""Workloads that run on a fabric's hosts."""
