"""Supervised Hierarchical Deep Hashing (SHDH).

Wang, D., Huang, H., Lu, C., Feng, B.-S., Nie, L., Wen, G., Mao, X.-L. "Supervised Deep Hashing for
Hierarchical Labeled Data", arXiv 1704.02088.

Importing the package creates no folders and makes no logging set-up or tracking calls.
"""

__version__ = "0.2.0"
