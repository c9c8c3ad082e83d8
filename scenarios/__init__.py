"""Scenarios: one module per scenario, each declaring parameters, workload and checks."""
