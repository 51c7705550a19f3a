"""Supervised Hierarchical Deep Hashing (SHDH).

Wang, D., Huang, H., Lu, C., Feng, B.-S., Nie, L., Wen, G., Mao, X.-L. "Supervised Deep Hashing for
Hierarchical Labeled Data", arXiv 1704.02088.

Importing the package has no side effects: no folders, logging set-up or tracking calls.
"""

__version__ = "0.1.0"
