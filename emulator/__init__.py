"""Emulated Trn1 instance: hardware catalog, daemon, runtime client, cost model and workloads."""
