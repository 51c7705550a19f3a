"""The datasets: readers of each upstream format, verified downloads, the on-disk format and the
seeded split.

May import: core, ranking, runtime.
"""
