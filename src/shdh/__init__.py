"""Supervised Hierarchical Deep Hashing (SHDH).

Wang, D., Huang, H., Lu, C., Feng, B.-S., Nie, L., Wen, G., Mao, X.-L. "Supervised Deep Hashing for
Hierarchical Labeled Data", arXiv 1704.02088.

Importing the package creates no folders and makes no logging set-up or tracking calls; it only
lets the module paths of older releases import (shdh.runtime.moved_modules).
"""

from shdh.runtime import moved_modules

moved_modules.install()

__version__ = "0.1.0"
