"""The networks: the backbones (CNN-F, torchvision's and EfficientNet-Lite0), their
pretrained weights, the input views of training and encoding, and the segmented hashing head.

HEAD_INITS and BACKBONES are here, in a package body that imports nothing, because the training
loop's settings (shdh.training.loop_settings, torch-free so that checking params.yaml loads no
PyTorch) offer the same choices the hashing network takes.

May import: core, ranking, runtime.
"""

HEAD_INITS = ("default", "paper")  # the hashing head's initialisation (shdh.nets.hashing)
# The networks under the hashing head (shdh.nets.backbones); cnnf is the paper's, from scratch.
BACKBONES = ("cnnf", "alexnet", "resnet18", "resnet50", "vit_b_16", "efficientnet_lite0")
