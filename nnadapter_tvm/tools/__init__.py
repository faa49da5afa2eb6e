"""Offline tools over the runtime: the command line, deployment to boards, benchmarks, tuning."""
