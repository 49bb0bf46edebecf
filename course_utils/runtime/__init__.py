"""Where and how the models run: run profiles, devices, the training loop, data parallelism.

Imports from ``modeling`` only.
"""
