"""Hand-crafted image features for the shallow hashing baselines."""
