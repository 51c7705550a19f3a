"""The networks: the CNN-F backbone (cnnf) and the segmented hashing head (hashing).

HEAD_INITS is here, in a package body that imports nothing, because the training loop's settings
(shdh.training.loop_settings, torch-free so that checking params.yaml loads no PyTorch) offer
the same choices the hashing head takes.

May import: core, ranking, runtime.
"""

HEAD_INITS = ("default", "paper")  # the hashing head's initialisation (shdh.nets.hashing)
