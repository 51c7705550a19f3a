"""Hand-crafted image features for the shallow hashing baselines.

May import: core, ranking, runtime.
"""
